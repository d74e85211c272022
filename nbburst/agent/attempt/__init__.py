"""One attempt of a job on its machine: the controller, the runner it forks, and what passes between them."""
