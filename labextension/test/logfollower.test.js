// Unit tests of the log follower (src/logfollower.ts), against a stand-in for
// `GET /nbburst/api/jobs/{id}/logs` that answers as docs/rest-api.md says.
const test = require('node:test');
const assert = require('node:assert/strict');
const { LogFollower, TRIMMED_NOTE } = require('../test-lib/logfollower.js');

/** A job's logs on the server: attempt -> text so far, served `page` characters at a time. */
class Server {
  constructor(logs, page = 1000) {
    this.logs = logs;
    this.page = page;
    this.done = new Set();
    this.requests = [];
  }

  get latest() {
    return Math.max(...Object.keys(this.logs).map(Number));
  }

  read = async (attempt, offset) => {
    this.requests.push([attempt, offset]);
    const a = attempt ?? this.latest;
    const full = this.logs[a];
    const start = Math.min(offset, full.length);
    const text = full.slice(start, start + this.page);
    return {
      attempt: a,
      attempts: Object.keys(this.logs).map(Number),
      offset: start,
      next_offset: start + text.length,
      text,
      complete: (this.done.has(a) || a < this.latest) && start + text.length >= full.length
    };
  };
}

function recorder() {
  const changes = [];
  return { changes, onChange: change => changes.push(change) };
}

test('follows the latest attempt, page by page, until the log is complete', async () => {
  const server = new Server({ 1: 'line 0\nline 1\n' }, 7);
  const { changes, onChange } = recorder();
  const log = new LogFollower(onChange);
  assert.equal(log.status(false), '');

  await log.follow(server.read);
  assert.deepEqual(server.requests, [
    [null, 0],
    [1, 7],
    [1, 14]
  ]);
  assert.equal(log.attempt, 1);
  assert.equal(log.offset, 14);
  assert.equal(log.text, 'line 0\nline 1\n');
  assert.deepEqual(
    changes.map(c => c.kind),
    ['append', 'append', 'read']
  );
  assert.equal(log.complete, false);
  assert.equal(log.status(false), 'live');
  assert.equal(log.status(true), 'finishing…');

  server.logs[1] += 'line 2\n';
  server.done.add(1);
  await log.follow(server.read);
  assert.equal(log.text, 'line 0\nline 1\nline 2\n');
  assert.equal(log.complete, true);
  assert.equal(log.status(true), 'complete');

  const asked = server.requests.length;
  await log.follow(server.read); // complete: nothing more to ask
  assert.equal(server.requests.length, asked);
});

test('asks at most `pages` times in one follow', async () => {
  const server = new Server({ 1: 'x'.repeat(100) }, 10);
  const log = new LogFollower();
  await log.follow(server.read, 3);
  assert.equal(server.requests.length, 3);
  assert.equal(log.offset, 30);
});

test('a redraw (carriage return, escape) replaces what is shown, cleaned as a terminal shows it', async () => {
  const server = new Server({ 1: 'start\n' });
  const { changes, onChange } = recorder();
  const log = new LogFollower(onChange);
  await log.follow(server.read);
  server.logs[1] += ' 10%\r 50%\r\x1b[32m100%\x1b[0m\n';
  await log.follow(server.read);
  assert.deepEqual(changes[0], { kind: 'append', text: 'start\n' });
  assert.deepEqual(changes[2], { kind: 'replace' });
  assert.equal(log.text, 'start\n100%\n');
  server.logs[1] += 'after\n'; // the last line drawn ended the redraw: plain text is appended again
  await log.follow(server.read);
  assert.deepEqual(changes[4], { kind: 'append', text: 'after\n' });
});

test('a relaunch is followed: the new attempt starts over', async () => {
  const server = new Server({ 1: 'first\n' });
  const { changes, onChange } = recorder();
  const log = new LogFollower(onChange);
  await log.follow(server.read);
  server.logs[2] = 'second\n';
  log.jobSeen(2, [1, 2]);
  assert.equal(log.attempt, 2);
  assert.equal(log.offset, 0);
  assert.deepEqual(changes.at(-1), { kind: 'reset' });
  await log.follow(server.read);
  assert.equal(log.text, 'second\n');
  assert.deepEqual(log.attempts, [1, 2]);
  assert.equal(log.latest, 2);
});

test('an earlier attempt chosen stays shown through a relaunch', async () => {
  const server = new Server({ 1: 'first\n', 2: 'second\n' });
  const log = new LogFollower();
  await log.follow(server.read);
  assert.equal(log.attempt, 2);
  assert.equal(log.select(1), true);
  assert.equal(log.followsLatest, false);
  await log.follow(server.read);
  assert.equal(log.text, 'first\n');
  assert.equal(log.complete, true); // an attempt followed by another one is over
  server.logs[3] = 'third\n';
  log.jobSeen(3, [1, 2, 3]);
  assert.equal(log.attempt, 1);
  assert.deepEqual(log.attempts, [1, 2, 3]);

  assert.equal(log.select(1), false); // already shown: nothing starts over
  assert.equal(log.select(3), true);
  assert.equal(log.followsLatest, true);
});

test('an answer that arrives after the log started over is dropped', async () => {
  const server = new Server({ 1: 'old job\n' });
  const log = new LogFollower();
  let release;
  const slow = (attempt, offset) =>
    new Promise(resolve => {
      release = () => resolve(server.read(attempt, offset));
    });
  const following = log.follow(slow);
  log.clear(); // another job was opened meanwhile
  release();
  await following;
  assert.equal(log.attempt, null);
  assert.equal(log.text, '');
});

test('an answer for another attempt than asked starts over with it', async () => {
  const { changes, onChange } = recorder();
  const log = new LogFollower(onChange);
  const answers = [
    { attempt: 1, attempts: [1], offset: 0, next_offset: 4, text: 'one\n', complete: false },
    { attempt: 2, attempts: [1, 2], offset: 0, next_offset: 4, text: 'two\n', complete: true }
  ];
  await log.follow(async () => answers.shift());
  assert.equal(log.attempt, 2);
  assert.equal(log.text, 'two\n');
  assert.deepEqual(
    changes.map(c => c.kind),
    ['append', 'reset', 'append']
  );
});

test('a server that starts again from the beginning replaces the text', async () => {
  const { changes, onChange } = recorder();
  const log = new LogFollower(onChange);
  const answers = [
    { attempt: 1, attempts: [1], offset: 0, next_offset: 6, text: 'hello\n', complete: false },
    { attempt: 1, attempts: [1], offset: 0, next_offset: 6, text: 'howdy\n', complete: true }
  ];
  await log.follow(async () => answers.shift());
  assert.equal(log.text, 'howdy\n');
  assert.deepEqual(changes.at(-1), { kind: 'replace' });
});

test('above the limit, whole old lines are dropped and a note says so', async () => {
  const server = new Server({ 1: 'aaaa\nbbbb\n' });
  const log = new LogFollower(() => undefined, 12);
  await log.follow(server.read);
  assert.equal(log.text, 'aaaa\nbbbb\n');
  const { changes, onChange } = recorder();
  const small = new LogFollower(onChange, 12);
  server.logs[1] += 'cccc\n';
  await small.follow(server.read);
  assert.equal(small.text, TRIMMED_NOTE + 'bbbb\ncccc\n');
  assert.deepEqual(changes[0], { kind: 'replace' });
});

test('an empty log, once complete, says so', async () => {
  const server = new Server({ 1: '' });
  server.done.add(1);
  const log = new LogFollower();
  assert.equal(log.empty, false);
  await log.follow(server.read);
  assert.equal(log.empty, true);
  assert.equal(log.status(true), 'complete');
});

test("a reader's failure is thrown, and what was read before is kept", async () => {
  const server = new Server({ 1: 'kept\n' }, 5);
  const log = new LogFollower();
  let calls = 0;
  const flaky = async (attempt, offset) => {
    if (++calls === 2) {
      throw new Error('server gone');
    }
    return server.read(attempt, offset);
  };
  await assert.rejects(log.follow(flaky), /server gone/);
  assert.equal(log.text, 'kept\n');
  assert.equal(log.offset, 5);
});
