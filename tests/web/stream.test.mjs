// The live stream's client (clients/web/stream.js) under node's test runner,
// with a scripted EventSource and fetch in place of the browser's: the
// fallback to polling when the daemon has no stream route or the stream
// errors, the reconnect with last_event_id, duplicates dropped, `reset`
// reloading over REST, `end` closing for good.
import { test } from 'node:test';
import assert from 'node:assert/strict';

// fetched once per page (api.js caches it): the job stream's row, not /v1/stream's
const routeRows = [{ method: 'GET', path: '/v1/jobs/{id}/stream' }];
globalThis.fetch = async (url) => {
  assert.equal(url, '/assets/routes.json');
  return { ok: true, json: async () => ({ routes: routeRows }) };
};

class FakeES {
  static all = [];
  constructor(url) { this.url = url; this.listeners = {}; this.closed = false; FakeES.all.push(this); }
  addEventListener(type, fn) { (this.listeners[type] ||= []).push(fn); }
  close() { this.closed = true; }
  emit(type, id, data) { for (const fn of this.listeners[type] || []) fn({ lastEventId: id, data: JSON.stringify(data) }); }
}
globalThis.EventSource = FakeES;

const { Live } = await import('../../clients/web/stream.js');
const { StreamBook } = await import('../../clients/web/logic.js');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

test('no stream route: polls, never opens an EventSource', async () => {
  let polls = 0;
  const modes = [];
  const live = new Live({ url: '/v1/stream', template: '/v1/stream', handlers: {}, poll: async () => { polls++; },
    onMode: (m) => modes.push(m), pollMs: 10 });
  await live.start();
  await sleep(60);
  live.stop();
  assert.equal(FakeES.all.length, 0);
  assert.ok(polls >= 3, 'polled ' + polls);
  assert.deepEqual(modes, ['polling']);
});

test('stream: events delivered once, errors fall back to polling and reconnect after the last id', async () => {
  FakeES.all = [];
  let polls = 0;
  const got = [];
  const modes = [];
  const live = new Live({
    url: '/v1/jobs/j-1/stream', template: '/v1/jobs/{id}/stream',
    handlers: { metrics: (d) => got.push(d.step), end: () => got.push('end') },
    poll: async () => { polls++; }, onMode: (m) => modes.push(m), pollMs: 10,
    book: new StreamBook({ baseMs: 20, random: () => 1 }),
  });
  await live.start();
  assert.equal(polls, 1, 'the state is loaded once over REST first');
  const es1 = FakeES.all[0];
  assert.equal(es1.url, '/v1/jobs/j-1/stream');
  es1.onopen();
  es1.emit('metrics', '7', { step: 1 });
  es1.emit('metrics', '8', { step: 2 });
  es1.emit('metrics', '8', { step: 2 });
  assert.deepEqual(got, [1, 2]);
  // the stream breaks: polling until it is back, then a new stream after id 8
  es1.onerror();
  assert.ok(es1.closed);
  await sleep(15);
  assert.ok(polls >= 2, 'polls while the stream is down');
  await sleep(40);
  const es2 = FakeES.all[1];
  assert.ok(es2, 'reconnected');
  assert.equal(es2.url, '/v1/jobs/j-1/stream?last_event_id=8');
  es2.onopen();
  const p = polls;
  es2.emit('metrics', '8', { step: 2 }); // a replay the server should not send: dropped anyway
  es2.emit('metrics', '9', { step: 3 });
  await sleep(40);
  assert.equal(polls, p, 'no polling while the stream is open');
  // reset: forget the id, reload over REST
  es2.emit('reset', '', {});
  await sleep(1);
  assert.equal(polls, p + 1);
  es2.emit('metrics', '1', { step: 4 });
  es2.emit('end', '2', { job: 'j-1', state: 'succeeded' });
  assert.ok(es2.closed);
  es2.onerror(); // the close after end: no reconnect
  await sleep(60);
  live.stop();
  assert.deepEqual(got, [1, 2, 3, 4, 'end']);
  assert.equal(FakeES.all.length, 2);
  assert.deepEqual(modes, ['live', 'polling', 'live', 'ended']);
});
