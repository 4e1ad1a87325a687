// Unit tests of the dashboard's pure logic (clients/web/logic.js) with
// node's own test runner: `node --test tests/web/unit.test.mjs`.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import {
  ema, downsample, mergeRows, appendRows, StreamBook, pointerPosition, recoveryPhases, etaMs, flopsPerToken,
} from '../../clients/web/logic.js';

const rows = (n, valEvery = 0) => Array.from({ length: n }, (_, i) => ({
  step: i + 1, loss: 1 / (i + 1), val_loss: valEvery && (i + 1) % valEvery === 0 ? 2 : null, ms: 10,
}));

test('ema: no smoothing is the identity, nulls stay null and do not move it', () => {
  assert.deepEqual(ema([1, 2, 3], 0), [1, 2, 3]);
  const out = ema([1, null, 1, NaN, 1], 0.9);
  assert.equal(out[1], null);
  assert.equal(out[3], null);
  for (const i of [0, 2, 4]) assert.ok(Math.abs(out[i] - 1) < 1e-12, 'a constant stays constant (debiased)');
});

test('ema: follows a step change gradually', () => {
  const out = ema([0, 0, 0, 10, 10, 10, 10], 0.5);
  assert.equal(out[2], 0);
  assert.ok(out[3] > 0 && out[3] < 10);
  assert.ok(out[4] > out[3] && out[6] > out[5] && out[6] < 10);
});

test('downsample: at most max rows, first and last kept, evenly spread', () => {
  const r = rows(1000);
  for (const max of [2, 3, 10, 100, 999]) {
    const d = downsample(r, max);
    assert.equal(d.length, max);
    assert.equal(d[0].step, 1);
    assert.equal(d[d.length - 1].step, 1000);
    for (let i = 1; i < d.length; i++) assert.ok(d[i].step > d[i - 1].step);
    if (max >= 10) {
      const mean = 999 / (max - 1);
      for (let i = 1; i < d.length; i++) assert.ok(d[i].step - d[i - 1].step <= 2 * mean + 1);
    }
  }
  assert.equal(downsample(r, 1000).length, 1000);
  assert.equal(downsample(r, 5000).length, 1000);
});

test('downsample: validation rows are kept in preference', () => {
  const d = downsample(rows(5000, 50), 500);
  assert.equal(d.filter((x) => x.val_loss !== null).length, 100);
});

test('mergeRows: appends, and a repeated step (a restart) replaces the old row', () => {
  const a = rows(10);
  assert.equal(mergeRows(a, [{ step: 11, loss: 0 }]).length, 11);
  const m = mergeRows(a, [{ step: 12, loss: 7 }, { step: 5, loss: 9 }]);
  assert.deepEqual(m.map((r) => r.step), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12]);
  assert.equal(m[4].loss, 9);
  assert.equal(a[4].loss, 1 / 5, 'the input is not changed');
});

test('appendRows: keeps the array bounded by downsampling past 2 x max', () => {
  let r = [];
  for (let s = 1; s <= 5000; s++) r = appendRows(r, [{ step: s, loss: 1 }], 100);
  assert.ok(r.length <= 200);
  assert.equal(r[0].step, 1);
  assert.equal(r[r.length - 1].step, 5000);
});

test('StreamBook: duplicates and replays are dropped, ids compare as uint64', () => {
  const b = new StreamBook();
  assert.ok(b.accept('5'));
  assert.ok(!b.accept('5'));
  assert.ok(!b.accept('4'));
  assert.ok(b.accept('18446744073709551000'));
  assert.ok(!b.accept('18446744073709550999'), 'no precision loss past 2^53');
  assert.ok(b.accept(''), 'events without id pass');
  assert.equal(b.url('/v1/stream'), '/v1/stream?last_event_id=18446744073709551000');
  assert.equal(b.url('/x?a=1'), '/x?a=1&last_event_id=18446744073709551000');
  b.reset();
  assert.equal(b.url('/v1/stream'), '/v1/stream');
  assert.ok(b.accept('1'), 'after a reset the server numbering starts over');
});

test('StreamBook: reconnect delays back off to the cap and reset on open', () => {
  const b = new StreamBook({ baseMs: 1000, maxMs: 8000, random: () => 1 });
  assert.deepEqual([b.failed(), b.failed(), b.failed(), b.failed(), b.failed()], [1000, 2000, 4000, 8000, 8000]);
  b.opened();
  assert.equal(b.failed(), 1000);
  const j = new StreamBook({ baseMs: 1000, random: () => 0 });
  assert.equal(j.failed(), 500, 'jitter takes up to half off');
});

test('pointerPosition: the field of a pointer, in nested objects and arrays', () => {
  const text = '{\n  "name": "x",\n  "train": {\n    "steps": -5,\n    "lr": 1\n  },\n  "a/b": [10, {"c~d": 3}]\n}';
  const p = pointerPosition(text, '/train/steps');
  assert.equal(text.slice(p.start, p.end), '"steps": -5');
  assert.deepEqual([p.line, p.col, p.missing], [4, 5, false]);
  const q = pointerPosition(text, '/a~1b/1/c~0d');
  assert.equal(text.slice(q.start, q.end), '"c~d": 3');
  const r = pointerPosition(text, '/a~1b/0');
  assert.equal(text.slice(r.start, r.end), '10');
  const m = pointerPosition(text, '/train/warmup');
  assert.ok(m.missing);
  assert.equal(text.slice(m.start, m.start + 7), '"train"', 'a missing field points at its parent');
  assert.equal(pointerPosition(text, '').line, 1);
  assert.equal(pointerPosition('{"a": ', '/a'), null);
  const s = pointerPosition('{"x\\"y": {"z": "}"}}', '/x"y/z');
  assert.equal(s.missing, false);
});

test('recoveryPhases: the phases of a recovered event', () => {
  const r = recoveryPhases('recovered from rank 1 exited: attempt 2 resumed from snapshot step 20 in 1154 ms ' +
    '(detection 0 ms, respawn 21 ms, start 13 ms, rendezvous 218 ms, snapshot load 156 ms, first step 745 ms)');
  assert.equal(r.total, 1154);
  assert.deepEqual(r.phases.map((p) => p[0]), ['detection', 'respawn', 'start', 'rendezvous', 'snapshot load', 'first step']);
  assert.equal(r.phases[5][1], 745);
  assert.equal(recoveryPhases('all 2 rank(s) joined'), null);
  assert.equal(recoveryPhases(null), null);
});

test('etaMs and flopsPerToken', () => {
  assert.equal(etaMs(rows(10), 110), 100 * 10);
  assert.equal(etaMs([], 10), null);
  assert.equal(etaMs(rows(10), null), null);
  const f = flopsPerToken({ model: { n_layer: 1, n_embd: 2, vocab_size: 3, seq_len: 4 } });
  assert.equal(f, 6 * (12 * 4 + 6) + 12 * 4 * 2);
  assert.equal(flopsPerToken({}), null);
});
