// pages_jobs: the jobs list: state, name, world size, device, progress with
// ETA, latest loss with a sparkline, tokens/s, restarts; filter by state;
// live (GET /v1/jobs and each shown job's downsampled metrics; the global
// stream's `job` events).

import { h, setMode } from './app.js';
import { get, enc } from './api.js';
import { Live } from './stream.js';
import { sparkline } from './charts.js';
import { etaMs, fmtDuration, fmtNum } from './logic.js';

const STATES = ['all', 'queued', 'scheduled', 'running', 'recovering', 'succeeded', 'failed', 'cancelled'];
const SPARK_POINTS = 60;
const MAX_SPARKS = 40;

export function jobsPage(main, params) {
  let filter = params.get('state') || 'all';
  const select = h('select', { id: 'state-filter', onchange: () => { filter = select.value; render(); } },
    STATES.map((s) => h('option', { value: s, selected: s === filter }, s)));
  const body = h('tbody');
  main.append(h('h1', {}, 'Jobs'),
    h('div', { class: 'bar' }, h('label', {}, 'State ', select), h('a', { href: '#/submit' }, 'Submit a job')),
    h('div', { class: 'scroll' }, h('table', { id: 'jobs' },
      h('thead', {}, h('tr', {}, ['State', 'Name', 'World', 'Device', 'Progress', 'Loss', '', 'Tokens/s', 'Restarts']
        .map((t, i) => h('th', { class: i === 6 || i === 3 ? 'hide-narrow' : null }, t)))),
      body)));
  let jobs = [];
  const metrics = new Map(); // job id -> rows (downsampled)

  const render = () => {
    const shown = jobs.filter((j) => filter === 'all' || j.state === filter);
    body.replaceChildren(...shown.map((j) => {
      const rows = metrics.get(j.id) || [];
      const last = rows[rows.length - 1];
      const steps = j.spec && j.spec.train ? j.spec.train.steps : null;
      const par = (j.spec && j.spec.parallel) || {};
      const eta = j.state === 'running' ? etaMs(rows, steps) : null;
      const progress = last ? `${last.step} / ${steps ?? '?'}` : `0 / ${steps ?? '?'}`;
      return h('tr', { 'data-job': j.id },
        h('td', {}, h('span', { class: 'state ' + j.state }, j.state)),
        h('td', {}, h('a', { href: '#/jobs/' + enc(j.id) }, j.name || j.id), h('div', { class: 'muted' }, j.id)),
        h('td', {}, j.world_size),
        h('td', { class: 'hide-narrow' }, par.device || 'cpu'),
        h('td', {}, progress, eta !== null ? h('div', { class: 'muted' }, 'ETA ' + fmtDuration(eta)) : null),
        h('td', {}, last ? fmtNum(last.loss) : '–'),
        h('td', { class: 'hide-narrow' }, sparkline(rows.map((r) => r.loss))),
        h('td', {}, last ? fmtNum(last.tokens_per_s, 3) : '–'),
        h('td', {}, j.restarts));
    }));
    if (!shown.length) body.append(h('tr', {}, h('td', { colspan: 9, class: 'muted' }, 'no jobs')));
  };

  const loadMetrics = async (ids) => {
    await Promise.all(ids.map(async (id) => {
      const r = await get(`/v1/jobs/${enc(id)}/metrics?max_points=${SPARK_POINTS}`);
      if (r.status === 200) metrics.set(id, r.body.metrics);
    }));
  };

  const poll = async () => {
    const r = await get('/v1/jobs?limit=200');
    if (r.status !== 200) return;
    jobs = r.body.jobs;
    // rows for the jobs that change, and once for the others
    const want = jobs.filter((j) => ['running', 'recovering'].includes(j.state) || !metrics.has(j.id))
      .slice(0, MAX_SPARKS).map((j) => j.id);
    await loadMetrics(want);
    render();
  };

  const live = new Live({
    url: '/v1/stream', template: '/v1/stream', poll,
    handlers: {
      job: async (j) => {
        const i = jobs.findIndex((x) => x.id === j.id);
        if (i >= 0) jobs[i] = j; else jobs.unshift(j);
        render();
      },
    },
    onMode: (m) => setMode(m === 'live' ? '● live' : 'polling every 2 s'),
  });
  live.start();
  // the global stream carries no metrics: refresh running jobs' sparklines
  const tick = setInterval(async () => {
    if (!live.timer) {
      await loadMetrics(jobs.filter((j) => j.state === 'running').slice(0, MAX_SPARKS).map((j) => j.id));
      render();
    }
  }, 5000);
  return { stop() { live.stop(); clearInterval(tick); } };
}
