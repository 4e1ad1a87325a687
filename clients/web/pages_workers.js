// pages_workers: the nodes, their devices and slots, which job and rank
// runs on each, heartbeat age and state (GET /v1/workers; global stream).

import { h, setMode } from './app.js';
import { get } from './api.js';
import { Live } from './stream.js';

function age(t) {
  if (!t) return '–';
  const s = Math.max(0, (Date.now() - Date.parse(t)) / 1000);
  return s < 120 ? s.toFixed(1) + ' s' : Math.round(s / 60) + ' min';
}

export function workersPage(main) {
  const body = h('tbody');
  main.append(h('h1', {}, 'Workers'),
    h('div', { class: 'scroll' }, h('table', { id: 'workers' },
      h('thead', {}, h('tr', {}, ['Node', 'State', 'Devices', 'Slots used', 'Runs (job / rank)', 'Heartbeat age'].map((t) => h('th', {}, t)))),
      body)));
  let workers = [];
  const render = () => {
    body.replaceChildren(...workers.map((w) => {
      const devs = (w.devices || []).map((d) => `${d.kind}:${d.index}`);
      const runs = (w.ranks || []).map((r) => h('div', {},
        h('a', { href: '#/jobs/' + encodeURIComponent(r.job) }, r.job), ` rank ${r.rank} on ${r.device.kind}:${r.device.index} `,
        h('span', { class: 'state ' + r.state }, r.state)));
      return h('tr', {}, h('td', {}, w.node), h('td', {}, h('span', { class: 'state ' + w.state }, w.state)),
        h('td', {}, devs.join(', ') || '–'), h('td', {}, `${w.running_ranks} / ${devs.length}`),
        h('td', {}, runs.length ? runs : h('span', { class: 'muted' }, 'idle')), h('td', {}, age(w.last_heartbeat)));
    }));
    if (!workers.length) body.append(h('tr', {}, h('td', { colspan: 6, class: 'muted' }, 'no workers registered')));
  };
  const poll = async () => {
    const r = await get('/v1/workers');
    if (r.status === 200) { workers = r.body.workers; render(); }
  };
  const live = new Live({
    url: '/v1/stream', template: '/v1/stream', poll,
    handlers: {
      worker: (w) => {
        const i = workers.findIndex((x) => x.node === w.node);
        if (i >= 0) workers[i] = w; else workers.push(w);
        render();
      },
    },
    onMode: (m) => setMode(m === 'live' ? '● live' : 'polling every 2 s'),
  });
  live.start();
  const tick = setInterval(render, 1000); // heartbeat ages
  return { stop() { live.stop(); clearInterval(tick); } };
}
