// logic: the dashboard's pure functions (no DOM, no network), shared by the
// pages and tested by tests/web/unit.test.mjs under `node --test`.

// ---- smoothing ----

// Exponential moving average of `values` with weight `w` in [0, 1) on the
// past (0: no smoothing), TensorBoard's debiased form so the first points
// are not pulled towards 0. null and non-finite values stay null and do not
// move the average.
export function ema(values, w) {
  const out = new Array(values.length);
  let acc = 0, n = 0;
  for (let i = 0; i < values.length; i++) {
    const v = values[i];
    if (v === null || v === undefined || !Number.isFinite(v)) { out[i] = null; continue; }
    if (w <= 0) { out[i] = v; continue; }
    acc = acc * w + (1 - w) * v;
    n++;
    out[i] = acc / (1 - Math.pow(w, n));
  }
  return out;
}

// ---- metrics rows: downsampling and merging ----

// At most `max` (>= 2) of `rows` (sorted by step): the first and the last,
// and between them one per bucket of equal row counts, the bucket's first
// row with a val_loss preferred, else its first row. The same rule as the
// server's max_points (coordinatord/store_metrics.c).
export function downsample(rows, max) {
  const total = rows.length;
  if (total <= max) return rows.slice();
  const out = [rows[0]];
  const nb = max - 2;
  let bucket = -1, held = null;
  for (let i = 1; i < total - 1 && nb > 0; i++) {
    const b = Math.floor(((i - 1) * nb) / (total - 2));
    const r = rows[i];
    if (b !== bucket) {
      if (held) out.push(held);
      bucket = b;
      held = r;
    } else if (hasVal(r) && !hasVal(held)) {
      held = r;
    }
  }
  if (held) out.push(held);
  out.push(rows[total - 1]);
  return out;
}

function hasVal(r) {
  return r.val_loss !== null && r.val_loss !== undefined;
}

// `rows` (sorted by step) with `more` merged in: sorted by step, a row of
// a step already present replaced by the newer one (a restarted attempt
// repeats steps after its snapshot). Returns a new array.
export function mergeRows(rows, more) {
  if (more.length === 0) return rows.slice();
  const last = rows.length ? rows[rows.length - 1].step : -Infinity;
  const sorted = more.slice().sort((a, b) => a.step - b.step);
  if (sorted[0].step > last) return rows.concat(sorted);
  const byStep = new Map();
  for (const r of rows) byStep.set(r.step, r);
  for (const r of sorted) byStep.set(r.step, r);
  return [...byStep.values()].sort((a, b) => a.step - b.step);
}

// Append streamed rows, keeping the array under 2 * max by downsampling it
// back to `max` when it grows past (so a long job stays fast).
export function appendRows(rows, more, max) {
  const merged = mergeRows(rows, more);
  return merged.length > 2 * max ? downsample(merged, max) : merged;
}

// ---- the stream's reconnects ----

// Bookkeeping of one live stream: the last event id seen (for
// Last-Event-ID / ?last_event_id= on reconnect), duplicates dropped, and
// the reconnect delay (exponential with jitter, reset once a stream opens).
export class StreamBook {
  constructor({ baseMs = 1000, maxMs = 30000, random = Math.random } = {}) {
    this.baseMs = baseMs;
    this.maxMs = maxMs;
    this.random = random;
    this.lastId = null;
    this.failures = 0;
  }
  // Whether the event with `id` is new (and remember it). Ids are the
  // coordinator's monotonic uint64 as decimal strings; BigInt compares them.
  accept(id) {
    if (id === undefined || id === null || id === '') return true;
    let n;
    try { n = BigInt(id); } catch { return true; }
    if (this.lastId !== null && n <= this.lastId) return false;
    this.lastId = n;
    return true;
  }
  // The URL to (re)open: `url` plus last_event_id when one was seen.
  url(base) {
    if (this.lastId === null) return base;
    return base + (base.includes('?') ? '&' : '?') + 'last_event_id=' + this.lastId.toString();
  }
  opened() { this.failures = 0; }
  // The server said the id is too old to replay: forget it.
  reset() { this.lastId = null; }
  // A failure: the delay before the next try, in ms.
  failed() {
    const d = Math.min(this.maxMs, this.baseMs * Math.pow(2, this.failures));
    this.failures++;
    return Math.round(d * (0.5 + this.random() / 2));
  }
}

// ---- JSON pointer -> position in the editor's text ----

// The position of the value that RFC 6901 `pointer` names in the JSON
// `text`: {start, end, line, col} (offsets into text, line and col from 1).
// When the pointer goes deeper than the text has (a missing field), the
// deepest existing value's position with `missing` set. null when the text
// does not parse.
export function pointerPosition(text, pointer) {
  const parts = pointer === '' || pointer === undefined || pointer === null ? [] :
    pointer.replace(/^\//, '').split('/').map((p) => p.replace(/~1/g, '/').replace(/~0/g, '~'));
  let root;
  try { root = parseWithPositions(text); } catch { return null; }
  let node = root, missing = false;
  for (const key of parts) {
    let next;
    if (node.kind === 'object') next = node.members.get(key);
    else if (node.kind === 'array' && /^\d+$/.test(key)) next = node.items[Number(key)];
    if (!next) { missing = true; break; }
    node = next;
  }
  const start = node.keyStart !== undefined ? node.keyStart : node.start;
  const { line, col } = lineCol(text, start);
  return { start, end: node.end, line, col, missing };
}

function lineCol(text, offset) {
  let line = 1, col = 1;
  for (let i = 0; i < offset && i < text.length; i++) {
    if (text[i] === '\n') { line++; col = 1; } else col++;
  }
  return { line, col };
}

// A small JSON parser keeping each value's offsets (and, for members, the
// offset of their key). Throws on bad JSON.
function parseWithPositions(text) {
  let i = 0;
  const ws = () => { while (i < text.length && ' \t\r\n'.includes(text[i])) i++; };
  const fail = () => { throw new SyntaxError('bad JSON at ' + i); };
  const str = () => {
    const s = i;
    if (text[i] !== '"') fail();
    i++;
    while (i < text.length && text[i] !== '"') i += text[i] === '\\' ? 2 : 1;
    if (i >= text.length) fail();
    i++;
    return JSON.parse(text.slice(s, i));
  };
  const value = () => {
    ws();
    const start = i;
    const c = text[i];
    if (c === '{') {
      i++;
      const members = new Map();
      ws();
      if (text[i] === '}') { i++; return { kind: 'object', members, start, end: i }; }
      for (;;) {
        ws();
        const keyStart = i;
        const key = str();
        ws();
        if (text[i] !== ':') fail();
        i++;
        const v = value();
        v.keyStart = keyStart;
        members.set(key, v);
        ws();
        if (text[i] === ',') { i++; continue; }
        if (text[i] === '}') { i++; return { kind: 'object', members, start, end: i }; }
        fail();
      }
    }
    if (c === '[') {
      i++;
      const items = [];
      ws();
      if (text[i] === ']') { i++; return { kind: 'array', items, start, end: i }; }
      for (;;) {
        items.push(value());
        ws();
        if (text[i] === ',') { i++; continue; }
        if (text[i] === ']') { i++; return { kind: 'array', items, start, end: i }; }
        fail();
      }
    }
    if (c === '"') { str(); return { kind: 'string', start, end: i }; }
    const m = /^(-?\d+(\.\d+)?([eE][+-]?\d+)?|true|false|null)/.exec(text.slice(i, i + 64));
    if (!m) fail();
    i += m[0].length;
    return { kind: 'scalar', start, end: i };
  };
  const v = value();
  ws();
  if (i !== text.length) fail();
  return v;
}

// ---- events ----

// The phases of a `recovered` event's reason ("... in 812 ms (detection 3
// ms, respawn 500 ms, ...)"): {total, phases: [[name, ms], ...]}; null when
// the reason has none.
export function recoveryPhases(reason) {
  if (!reason) return null;
  const m = /in (\d+(?:\.\d+)?) ms \(([^)]*)\)/.exec(reason);
  if (!m) return null;
  const phases = [];
  for (const part of m[2].split(',')) {
    const p = /^\s*(.+?) (\d+(?:\.\d+)?) ms\s*$/.exec(part);
    if (p) phases.push([p[1], Number(p[2])]);
  }
  return { total: Number(m[1]), phases };
}

// ---- figures ----

// Remaining time in ms to reach `steps` from the rows' last step, from the
// mean step time (ms) of the last `window` rows; null when unknown.
export function etaMs(rows, steps, window = 20) {
  if (!rows.length || !steps) return null;
  const last = rows[rows.length - 1];
  const tail = rows.slice(-window).map((r) => r.ms).filter((v) => Number.isFinite(v) && v > 0);
  if (!tail.length) return null;
  const mean = tail.reduce((a, b) => a + b, 0) / tail.length;
  return Math.max(0, (steps - last.step) * mean);
}

export function fmtDuration(ms) {
  if (ms === null || ms === undefined || !Number.isFinite(ms)) return '–';
  const s = Math.round(ms / 1000);
  if (s < 60) return s + ' s';
  if (s < 3600) return Math.floor(s / 60) + ' min ' + (s % 60) + ' s';
  return Math.floor(s / 3600) + ' h ' + Math.floor((s % 3600) / 60) + ' min';
}

export function fmtNum(v, digits = 4) {
  if (v === null || v === undefined || !Number.isFinite(v)) return '–';
  if (Math.abs(v) >= 1e4) return v.toExponential(2);
  return Number(v.toPrecision(digits)).toString();
}

export function fmtBytes(n) {
  if (!Number.isFinite(n)) return '–';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + ' ' + u[i];
}

// Model FLOPs per token of a GPT-2 spec (6N for the weights plus the
// attention term), for the MFU chart; null when the spec has no model.
export function flopsPerToken(spec) {
  const m = spec && spec.model;
  if (!m || !m.n_layer || !m.n_embd) return null;
  const n = 12 * m.n_layer * m.n_embd * m.n_embd + (m.vocab_size || 0) * m.n_embd;
  return 6 * n + 12 * m.n_layer * (m.seq_len || 0) * m.n_embd;
}
