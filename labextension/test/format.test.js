// Unit tests of the pure helpers (no browser, no JupyterLab):
//   npm test   (compiles the pure modules to test-lib/ and runs node --test on test/)
const test = require('node:test');
const assert = require('node:assert/strict');
const f = require('../test-lib/format.js');

const job = overrides => ({
  id: 'j1',
  name: 'search',
  state: 'RUNNING',
  attempt: 1,
  backend: 'gce',
  machine: {
    type: 'n2-standard-64',
    cores: 64,
    memory_gb: 256,
    gpu: null,
    spot: true,
    zone: 'europe-west4-a'
  },
  created: 1700000000,
  started: 1700000010,
  ended: null,
  elapsed_s: 72,
  cost_usd: 0.034,
  cost_per_hour_usd: 1.2,
  progress: null,
  message: '',
  ...overrides
});

test('formatElapsed', () => {
  assert.equal(f.formatElapsed(0), '0s');
  assert.equal(f.formatElapsed(42.7), '42s');
  assert.equal(f.formatElapsed(72), '1m 12s');
  assert.equal(f.formatElapsed(3600 * 2 + 5 * 60 + 3), '2h 05m');
  assert.equal(f.formatElapsed(86400 * 3 + 3600 * 4), '3d 4h');
  assert.equal(f.formatElapsed(null), '–');
  assert.equal(f.formatElapsed(-5), '0s');
});

test('formatCost and formatRate', () => {
  assert.equal(f.formatCost(0.034), '$0.03');
  assert.equal(f.formatCost(0), '$0.00');
  assert.equal(f.formatCost(0.001), '<$0.01');
  assert.equal(f.formatCost(12.4), '$12.40');
  assert.equal(f.formatCost(1234.5), '$1,235');
  assert.equal(f.formatCost(undefined), '–');
  assert.equal(f.formatRate(1.2), '$1.20/h');
});

test('machineSummary', () => {
  assert.equal(f.machineSummary(job()), 'n2-standard-64 · spot');
  assert.equal(
    f.machineSummary(job({ machine: { ...job().machine, spot: false, gpu: 'nvidia-l4' } })),
    'n2-standard-64 · nvidia-l4 · on-demand'
  );
  assert.equal(f.machineSummary(job({ machine: null })), 'gce');
  assert.equal(
    f.machineSummary(job({ backend: 'local', machine: { ...job().machine, type: 'local-4' } })),
    'local-4'
  );
  assert.equal(f.machineDetail(job()), 'n2-standard-64 · spot · 64 cores, 256 GB · europe-west4-a');
});

test('states', () => {
  assert.equal(f.stateClass('RUNNING'), 'nbburst-state-running');
  assert.equal(f.stateClass('PREEMPTED'), 'nbburst-state-preempted');
  assert.equal(f.stateClass(''), 'nbburst-state-unknown');
  assert.ok(f.isTerminal('SUCCEEDED'));
  assert.ok(f.isTerminal('cancelled'));
  assert.ok(!f.isTerminal('PREEMPTED'));
  assert.ok(!f.isTerminal('PROVISIONING'));
});

test('statusText counts unfinished jobs and sums their hourly cost', () => {
  assert.equal(f.statusText([]), '');
  assert.equal(f.statusText([job({ state: 'SUCCEEDED' })]), '');
  assert.equal(f.statusText([job()]), '1 burst job running · $1.20/h');
  assert.equal(
    f.statusText([
      job(),
      job({ id: 'j2', state: 'PROVISIONING', cost_per_hour_usd: 1.9 }),
      job({ id: 'j3', state: 'FAILED' })
    ]),
    '2 burst jobs running · $3.10/h'
  );
});

test('progress', () => {
  assert.equal(f.progressSummary(null), '');
  assert.equal(f.progressSummary({ done: 12, total: 500, desc: 'fits' }), '12/500 fits');
  assert.equal(f.progressSummary({ done: 1204, total: null, desc: 'rows' }), '1,204 rows');
  assert.equal(f.progressFraction({ done: 50, total: 200, desc: '' }), 0.25);
  assert.equal(f.progressFraction({ done: 5, total: null, desc: '' }), null);
  // A loop ended (the job cleared its progress): nothing to show, not "null".
  assert.equal(f.progressSummary({ done: null, total: null, desc: '' }), '');
  assert.equal(f.progressFraction({ done: null, total: null, desc: '' }), null);
});

test('cleanLog strips ANSI colours and applies carriage returns', () => {
  assert.equal(f.cleanLog('plain\ntext\n'), 'plain\ntext\n');
  assert.equal(f.cleanLog('\x1b[31mred\x1b[0m\n'), 'red\n');
  assert.equal(f.cleanLog(' 10%|#\r 50%|###\r100%|#####\ndone\n'), '100%|#####\ndone\n');
  assert.equal(f.cleanLog('a\r\nb\r\n'), 'a\nb\n');
  assert.equal(f.cleanLog('step 1\r'), 'step 1');
});

test('formatTime shows the time alone for today', () => {
  const now = new Date(2026, 0, 15, 18, 0, 0);
  const today = new Date(2026, 0, 15, 9, 30, 0).getTime() / 1000;
  const earlier = new Date(2026, 0, 3, 9, 30, 0).getTime() / 1000;
  assert.ok(!/Jan/.test(f.formatTime(today, now)));
  assert.match(f.formatTime(today, now), /30/);
  assert.match(f.formatTime(earlier, now), /Jan/);
  assert.equal(f.formatTime(null, now), '–');
});

test('formatSpend shows the cost against the budget when the job has one', () => {
  assert.equal(f.formatSpend(job({})), '$0.03');
  assert.equal(
    f.formatSpend(job({ budget: { usd: 2.5, spent: 0.034, left: 2.466, share: 0.0136 } })),
    '$0.03 of $2.50'
  );
});

test('workersSummary counts the workers by state, with their share of the cost', () => {
  assert.equal(f.workersSummary(null), '');
  const workers = {
    count: 2,
    states: { RUNNING: 1, PROVISIONING: 1 },
    cost_usd: 0.021,
    dashboard: 'http://10.0.0.2:8787/status'
  };
  assert.equal(f.workersSummary(workers), '2 workers: 1 PROVISIONING, 1 RUNNING ($0.02)');
  assert.equal(f.dashboardPath('j 1', workers), 'nbburst/dask/j%201/status');
  assert.equal(f.dashboardPath('j1', { ...workers, dashboard: null }), null);
});

test('keptSummary says the price and when the kept machine goes', () => {
  assert.equal(f.keptSummary(null), '');
  const running = { idle_s: 600, until: null, cost_per_hour_usd: 0.19 };
  assert.match(f.keptSummary(running), /^warm at \$0\.19\/h, goes 10m.* after this cell/);
  const ended = { idle_s: 600, until: 1000 + 540, cost_per_hour_usd: 0.19 };
  assert.match(f.keptSummary(ended, 1000), /^warm at \$0\.19\/h, goes at .* \(in 9m.*\) unless/);
});

test('sessionSummary and sessionTimeLeft', () => {
  const session = {
    name: 'default',
    state: 'RUNNING',
    backend: 'local',
    machine: 'nbburst-session-default-abc123',
    cores: 2,
    cells: 1,
    running: 1,
    started: 1700000000,
    idle_s: 600,
    until: 1700003600,
    cost_per_hour_usd: 0,
    cost_usd: 0
  };
  assert.equal(f.sessionSummary(session), 'local · 2 cores · 1 cell (1 running)');
  assert.equal(
    f.sessionSummary({ ...session, cores: 1, cells: 3, running: 0 }),
    'local · 1 core · 3 cells'
  );
  assert.equal(f.sessionTimeLeft(session, 1700000000), '1h 00m left');
  assert.equal(f.sessionTimeLeft(session, 1700009999), '0s left');
});
