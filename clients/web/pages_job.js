// pages_job: one job: loss and validation loss (EMA slider, raw line faint,
// log scale, zoom, hover readout), learning rate, gradient norm, tokens/s
// and MFU; the ranks; the timeline of attempts and recoveries; checkpoints
// with their `ringctl export` line; logs with follow and a rank filter;
// cancel; the trace. Rows come downsampled (max_points) and new ones from
// the job's stream (or by polling since the last step).

import { h, setMode } from './app.js';
import { get, post, has, enc } from './api.js';
import { Live } from './stream.js';
import { lineChart } from './charts.js';
import { ema, appendRows, etaMs, fmtDuration, fmtNum, fmtBytes, recoveryPhases, flopsPerToken } from './logic.js';

export const MAX_POINTS = 2000;
const MAX_LOG_LINES = 5000;
const PHASE_COLORS = ['#60a5fa', '#f59e0b', '#a78bfa', '#34d399', '#f472b6', '#94a3b8'];
const FINAL = ['succeeded', 'failed', 'cancelled'];

export function jobPage(main, id) {
  const base = `/v1/jobs/${enc(id)}`;
  const st = { job: null, rows: [], events: [], checkpoints: [], logs: [], logNext: 0, hasLogs: false };
  let smoothing = Number(localStorage.getItem('rm.smoothing') ?? 0.6);
  let logScale = localStorage.getItem('rm.log') === '1';
  let peak = Number(localStorage.getItem('rm.peak') || 0);

  // ---- the page's parts ----
  const title = h('h1', {}, id);
  const summary = h('div', { class: 'kv', id: 'summary' });
  const cancelBtn = h('button', { class: 'danger', id: 'cancel', onclick: () => dialog.showModal() }, 'Cancel job');
  const trace = h('a', { href: `${base}/trace`, download: `${id}-trace.json`, id: 'trace' }, 'Download trace (Perfetto)');
  const dialog = h('dialog', { id: 'confirm-cancel' },
    h('p', {}, `Cancel job ${id}? Its ranks are stopped; its checkpoints stay.`),
    h('div', { class: 'bar' },
      h('button', { class: 'danger', id: 'confirm-yes', onclick: async () => {
        dialog.close();
        const r = await post(`${base}/cancel`);
        if (r.status >= 400) alertBox.textContent = (r.body && r.body.detail) || `cancel failed (${r.status})`;
        poll();
      } }, 'Cancel the job'),
      h('button', { id: 'confirm-no', onclick: () => dialog.close() }, 'Keep it')));
  const alertBox = h('div', { class: 'error', role: 'alert' });

  const slider = h('input', { type: 'range', min: 0, max: 0.99, step: 0.01, value: smoothing, id: 'smoothing',
    oninput: () => { smoothing = Number(slider.value); sval.textContent = smoothing.toFixed(2); localStorage.setItem('rm.smoothing', smoothing); draw(); } });
  const sval = h('span', {}, smoothing.toFixed(2));
  const logBox = h('input', { type: 'checkbox', checked: logScale, id: 'logscale',
    onchange: () => { logScale = logBox.checked; localStorage.setItem('rm.log', logScale ? '1' : '0'); makeLossChart(); draw(); } });
  const peakIn = h('input', { type: 'number', min: 0, step: 'any', value: peak || '', placeholder: 'peak TFLOP/s per device', id: 'peak', class: 'narrow',
    onchange: () => { peak = Number(peakIn.value) || 0; localStorage.setItem('rm.peak', peak); draw(); } });
  const lossEl = h('div', { class: 'card', id: 'chart-loss' });
  const lrEl = h('div', { class: 'card', id: 'chart-lr' });
  const gnEl = h('div', { class: 'card', id: 'chart-gn' });
  const tpsEl = h('div', { class: 'card', id: 'chart-tps' });
  const mfuEl = h('div', { class: 'card', id: 'chart-mfu' });
  const ranksBody = h('tbody');
  const timeline = h('ul', { class: 'timeline', id: 'timeline' });
  const ckBody = h('tbody');
  const rankSel = h('select', { id: 'log-rank', onchange: () => reloadLogs() }, h('option', { value: '' }, 'all ranks'));
  const follow = h('input', { type: 'checkbox', checked: true, id: 'log-follow' });
  const logsEl = h('div', { class: 'logs', id: 'logs' });

  main.append(title, alertBox,
    h('div', { class: 'bar' }, cancelBtn, trace), dialog, summary,
    h('h2', {}, 'Training'),
    h('div', { class: 'bar' }, h('label', {}, 'Smoothing ', slider, ' ', sval), h('label', {}, logBox, ' log scale'),
      h('span', { class: 'muted' }, 'drag to zoom, double-click to reset')),
    h('div', { class: 'grid' }, lossEl, lrEl, gnEl, tpsEl, h('div', {}, mfuEl, h('label', { class: 'muted' }, 'MFU against ', peakIn)))),
  main.append(
    h('h2', {}, 'Ranks'),
    h('div', { class: 'scroll' }, h('table', { id: 'ranks' }, h('thead', {}, h('tr', {},
      ['Rank', 'Node', 'Device', 'State', 'Step time', 'Memory'].map((t) => h('th', {}, t)))), ranksBody)),
    h('h2', {}, 'Timeline'), timeline,
    h('h2', {}, 'Checkpoints'),
    h('div', { class: 'scroll' }, h('table', { id: 'checkpoints' }, h('thead', {}, h('tr', {},
      ['Step', 'Attempt', 'Size', 'Committed', 'Export'].map((t) => h('th', {}, t)))), ckBody)),
    h('h2', {}, 'Logs'),
    h('div', { class: 'bar' }, rankSel, h('label', {}, follow, ' follow')), logsEl);

  // ---- charts ----
  let lossChart = null;
  const makeLossChart = () => {
    if (lossChart) lossChart.destroy();
    lossEl.replaceChildren();
    lossChart = lineChart(lossEl, [
      { label: 'loss (raw)', color: '#2563eb', faint: true },
      { label: 'loss', color: '#2563eb' },
      { label: 'val loss', color: '#dc2626', points: true },
    ], { title: 'Loss', log: logScale });
  };
  makeLossChart();
  const lrChart = lineChart(lrEl, [{ label: 'lr', color: '#9333ea' }], { title: 'Learning rate', height: 180 });
  const gnChart = lineChart(gnEl, [{ label: 'grad norm', color: '#ea580c' }], { title: 'Gradient norm', height: 180 });
  const tpsChart = lineChart(tpsEl, [{ label: 'tokens/s', color: '#16a34a' }], { title: 'Tokens/s', height: 180 });
  const mfuChart = lineChart(mfuEl, [{ label: 'TFLOP/s', color: '#0891b2' }, { label: 'MFU %', color: '#be185d' }],
    { title: 'Model FLOP/s and MFU', height: 180 });

  let drawQueued = false;
  const draw = () => {
    if (drawQueued) return;
    drawQueued = true;
    requestAnimationFrame(() => { drawQueued = false; drawNow(); });
  };
  const pos = (v) => (v !== null && Number.isFinite(v) && (!logScale || v > 0) ? v : null);
  const drawNow = () => {
    const rows = st.rows;
    const xs = rows.map((r) => r.step);
    const loss = rows.map((r) => pos(r.loss));
    lossChart.update([xs, loss, ema(loss, smoothing), rows.map((r) => pos(r.val_loss))]);
    lrChart.update([xs, rows.map((r) => r.lr)]);
    gnChart.update([xs, rows.map((r) => r.grad_norm)]);
    tpsChart.update([xs, rows.map((r) => r.tokens_per_s)]);
    const fpt = flopsPerToken(st.job && st.job.spec);
    const world = (st.job && st.job.world_size) || 1;
    const tf = rows.map((r) => (fpt && Number.isFinite(r.tokens_per_s) ? (r.tokens_per_s * fpt) / 1e12 : null));
    mfuChart.update([xs, tf, tf.map((v) => (v !== null && peak > 0 ? (100 * v) / (peak * world) : null))]);
    lossEl.dataset.points = String(rows.length);
    lossEl.dataset.lastStep = rows.length ? String(rows[rows.length - 1].step) : '0';
    renderSummary();
  };

  // ---- the tables ----
  const renderSummary = () => {
    const j = st.job;
    if (!j) return;
    title.textContent = j.name || j.id;
    const last = st.rows[st.rows.length - 1];
    const steps = j.spec && j.spec.train ? j.spec.train.steps : null;
    const eta = j.state === 'running' ? etaMs(st.rows, steps) : null;
    const kv = [
      ['State', h('span', { class: 'state ' + j.state, id: 'job-state' }, j.state)],
      ['Id', j.id],
      ['Reason', j.state_reason || '–'],
      ['Progress', `${last ? last.step : 0} / ${steps ?? '?'}` + (eta !== null ? ` (ETA ${fmtDuration(eta)})` : '')],
      ['Latest loss', last ? fmtNum(last.loss) : '–'],
      ['World size', String(j.world_size)],
      ['Device', (j.spec && j.spec.parallel && j.spec.parallel.device) || 'cpu'],
      ['Attempt / restarts', `${j.attempt} / ${j.restarts}`],
      ['Submitted by', j.submitted_by || '–'],
    ];
    if (j.cancelled_by) kv.push(['Cancelled by', j.cancelled_by]);
    summary.replaceChildren(...kv.flatMap(([k, v]) => [h('span', { class: 'muted' }, k), h('span', {}, v)]));
    cancelBtn.disabled = FINAL.includes(j.state);
  };

  const renderRanks = () => {
    const last = st.rows[st.rows.length - 1];
    const ranks = (st.job && st.job.ranks) || [];
    ranksBody.replaceChildren(...ranks.map((r) => {
      const m = r.memory;
      const total = m ? m.params_bytes + m.grads_bytes + m.optim_bytes + m.activations_bytes : null;
      return h('tr', {}, h('td', {}, r.rank), h('td', {}, r.node), h('td', {}, `${r.device.kind}:${r.device.index}`),
        h('td', {}, h('span', { class: 'state ' + r.state }, r.state)),
        h('td', {}, last && Number.isFinite(last.ms) ? `${fmtNum(last.ms, 3)} ms` : '–'),
        h('td', { title: m ? `params ${fmtBytes(m.params_bytes)}, grads ${fmtBytes(m.grads_bytes)}, optimizer ${fmtBytes(m.optim_bytes)}, activations ${fmtBytes(m.activations_bytes)}` : '' },
          total !== null ? fmtBytes(total) : '–'));
    }));
    const seen = new Set([...rankSel.options].map((o) => o.value));
    for (const r of ranks) if (!seen.has(String(r.rank))) rankSel.append(h('option', { value: r.rank }, `rank ${r.rank}`));
  };

  const renderTimeline = () => {
    timeline.replaceChildren(...st.events.map((ev) => {
      const cls = ev.type === 'state' ? (ev.to || '') : ev.type;
      const rec = ev.type === 'recovered' ? recoveryPhases(ev.reason) : null;
      const what = ev.type === 'state' ? `${ev.from || '∅'} → ${ev.to}` : ev.type;
      return h('li', { class: cls, 'data-type': ev.type },
        h('div', {}, h('strong', {}, what), ` · attempt ${ev.attempt} · `, h('span', { class: 'muted' }, new Date(ev.at).toLocaleString()),
          ev.actor ? h('span', { class: 'muted' }, ` · by ${ev.actor}`) : null),
        ev.reason ? h('div', {}, ev.reason) : null,
        rec ? h('div', { class: 'phases', title: 'where the recovery time went' },
          rec.phases.map(([name, ms], i) => {
            const s = h('span', { title: `${name} ${ms} ms` });
            s.style.flexGrow = String(Math.max(ms, rec.total / 200));
            s.style.background = PHASE_COLORS[i % PHASE_COLORS.length];
            return s;
          })) : null,
        rec ? h('div', { class: 'muted' }, rec.phases.map(([n, ms]) => `${n} ${ms} ms`).join(' · ')) : null);
    }));
    if (!st.events.length) timeline.append(h('li', { class: 'muted' }, 'no events yet'));
  };

  const renderCheckpoints = () => {
    ckBody.replaceChildren(...st.checkpoints.map((c) => {
      const line = `ringctl export ${id} --step ${c.step} -o ${id}-step-${c.step}.safetensors`;
      const code = h('code', { class: 'copy' }, line);
      return h('tr', {}, h('td', {}, c.step), h('td', {}, c.attempt), h('td', {}, fmtBytes(c.bytes)),
        h('td', {}, new Date(c.committed_at).toLocaleString()),
        h('td', {}, code, ' ', h('button', { onclick: (e) => copy(line, code, e.target) }, 'Copy')));
    }));
    if (!st.checkpoints.length) ckBody.append(h('tr', {}, h('td', { colspan: 5, class: 'muted' }, 'no checkpoints yet')));
  };

  // ---- logs ----
  const logLine = (l) => h('div', { class: l.stream }, h('span', { class: 'r' }, `[${l.rank}] `), l.text);
  const renderLogs = (lines, replace) => {
    const stick = logsEl.scrollTop + logsEl.clientHeight >= logsEl.scrollHeight - 4;
    if (replace) logsEl.replaceChildren();
    if (!st.hasLogs) { logsEl.replaceChildren(h('span', { class: 'muted' }, 'no logs yet')); return; }
    logsEl.append(...lines.map(logLine));
    while (logsEl.childElementCount > MAX_LOG_LINES) logsEl.firstElementChild.remove();
    if (!logsEl.childElementCount) logsEl.append(h('span', { class: 'muted empty' }, 'no logs yet'));
    else logsEl.querySelector('.empty')?.remove();
    if (stick || replace) logsEl.scrollTop = logsEl.scrollHeight;
  };
  const logQuery = () => (rankSel.value !== '' ? `&rank=${enc(rankSel.value)}` : '');
  const reloadLogs = async () => {
    st.hasLogs = await has('GET', '/v1/jobs/{id}/logs');
    if (!st.hasLogs) { renderLogs([], true); return; }
    const r = await get(`${base}/logs?tail=500${logQuery()}`);
    if (r.status !== 200) { st.hasLogs = false; renderLogs([], true); return; }
    st.logNext = r.body.next || 0;
    renderLogs(r.body.lines, true);
  };
  const pollLogs = async () => {
    if (!st.hasLogs || !follow.checked) return;
    const r = await get(`${base}/logs?since=${st.logNext}${logQuery()}`);
    if (r.status === 200) {
      st.logNext = r.body.next || st.logNext;
      renderLogs(r.body.lines, false);
    }
  };
  const onLog = (l) => {
    if (!follow.checked || l.seq <= st.logNext) return;
    st.logNext = l.seq;
    if (rankSel.value === '' || String(l.rank) === rankSel.value) renderLogs([l], false);
  };

  // ---- loading ----
  const loadJob = async () => {
    const r = await get(base);
    if (r.status === 404) { alertBox.textContent = `no such job ${id}`; live.stop(); return false; }
    if (r.status === 200) st.job = r.body;
    return true;
  };
  const loadEvents = async () => {
    const evs = [];
    let cursor = null;
    for (let i = 0; i < 20; i++) {
      const r = await get(`${base}/events?limit=1000${cursor ? '&cursor=' + enc(cursor) : ''}`);
      if (r.status !== 200) return;
      evs.push(...r.body.events);
      cursor = r.body.next_cursor;
      if (!cursor) break;
    }
    st.events = evs;
  };
  const loadMetrics = async (full) => {
    if (full || !st.rows.length) {
      const r = await get(`${base}/metrics?max_points=${MAX_POINTS}`);
      if (r.status === 200) st.rows = r.body.metrics;
      return;
    }
    const since = st.rows[st.rows.length - 1].step + 1;
    const r = await get(`${base}/metrics?since_step=${since}&limit=10000`);
    if (r.status === 200) st.rows = appendRows(st.rows, r.body.metrics, MAX_POINTS);
  };
  const loadCheckpoints = async () => {
    const r = await get(`${base}/checkpoints`);
    if (r.status === 200) st.checkpoints = r.body.checkpoints;
  };
  let first = true;
  const poll = async (full) => {
    const [found] = await Promise.all([loadJob(), loadEvents(), loadMetrics(full || first), loadCheckpoints(),
      first ? reloadLogs() : pollLogs()]);
    if (!found) return;
    first = false;
    draw(); renderRanks(); renderTimeline(); renderCheckpoints();
  };

  const live = new Live({
    url: `${base}/stream`, template: '/v1/jobs/{id}/stream', poll: () => poll(false),
    handlers: {
      state: async () => { await loadJob(); renderRanks(); renderSummary(); loadCheckpoints().then(renderCheckpoints); },
      event: (ev) => {
        if (!st.events.some((e) => e.id === ev.id)) st.events.push(ev);
        renderTimeline();
        if (ev.type === 'checkpoint') loadCheckpoints().then(renderCheckpoints);
      },
      metrics: (row) => { st.rows = appendRows(st.rows, [row], MAX_POINTS); draw(); },
      log: onLog,
      end: async () => { await poll(false); },
    },
    onMode: (m) => setMode(m === 'live' ? '● live' : m === 'ended' ? 'job ended' : 'polling every 2 s'),
  });
  live.start();
  follow.addEventListener('change', () => { if (follow.checked) pollLogs(); });
  return {
    stop() {
      live.stop();
      for (const c of [lossChart, lrChart, gnChart, tpsChart, mfuChart]) c.destroy();
    },
  };
}

function copy(text, code, button) {
  const done = () => { button.textContent = 'Copied'; setTimeout(() => { button.textContent = 'Copy'; }, 1500); };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(text).then(done, () => select(code));
  } else {
    select(code);
  }
}

function select(el) {
  const range = document.createRange();
  range.selectNodeContents(el);
  const sel = window.getSelection();
  sel.removeAllRanges();
  sel.addRange(range);
}
