// Unit tests of the sidebar views' one polling rule (src/visiblepoll.ts), on lumino's real Poll.
const test = require('node:test');
const assert = require('node:assert/strict');
const { VisiblePoll } = require('../test-lib/visiblepoll.js');

/** A poll whose fetches are counted; `options` as VisiblePoll takes them. */
function counted(options = {}) {
  const counter = { fetches: 0 };
  const poll = new VisiblePoll({
    name: 'test',
    fetch: async () => {
      counter.fetches++;
    },
    ...options
  });
  return { poll, counter };
}

test('a view off screen is not fetched for; coming on screen fetches at once', async () => {
  const { poll, counter } = counted();
  try {
    await poll.refresh();
    assert.equal(counter.fetches, 0);
    poll.visible = true;
    await poll.refresh();
    assert.ok(counter.fetches >= 1);
    assert.equal(poll.visible, true);
  } finally {
    poll.dispose();
  }
  assert.equal(poll.isDisposed, true);
  await poll.refresh(); // harmless once disposed
});

test('nothing due: no fetch, even on screen', async () => {
  let due = false;
  const { poll, counter } = counted({ due: () => due });
  try {
    poll.visible = true;
    await poll.refresh();
    assert.equal(counter.fetches, 0);
    due = true;
    await poll.refresh();
    assert.equal(counter.fetches, 1);
  } finally {
    poll.dispose();
  }
});

test('off screen, it fetches while something else needs it', async () => {
  let needed = true;
  const { poll, counter } = counted({ offScreen: () => needed });
  try {
    await poll.refresh();
    assert.equal(counter.fetches, 1);
    needed = false;
    await poll.refresh();
    assert.equal(counter.fetches, 1);
  } finally {
    poll.dispose();
  }
});
