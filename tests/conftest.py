pytest_plugins = ["nbburst.testing.pytest_plugin"]
