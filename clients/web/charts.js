// charts: uPlot line charts of metrics rows against the step, and the
// little SVG sparklines of the jobs list.

import uPlot from './uPlot.esm.js';

const COLORS = ['#2563eb', '#dc2626', '#16a34a', '#9333ea', '#ea580c'];

function width(el) {
  return Math.max(260, Math.floor(el.getBoundingClientRect().width || el.clientWidth || 600));
}

// A chart in `el`: series [{label, color, faint, points}], x = step.
// opts: {title, log: bool, height}. Returns {update(xs, ys[]), destroy()}.
export function lineChart(el, series, opts = {}) {
  const data = [[], ...series.map(() => [])];
  const u = new uPlot({
    title: opts.title,
    width: width(el),
    height: opts.height || 220,
    scales: { x: { time: false }, y: opts.log ? { distr: 3 } : {} },
    cursor: { drag: { x: true, y: false } },
    legend: { live: true },
    axes: [{ label: 'step' }, {}],
    series: [
      { label: 'step' },
      ...series.map((s, i) => ({
        label: s.label,
        stroke: s.faint ? hexAlpha(s.color || COLORS[i], 0.25) : (s.color || COLORS[i]),
        width: s.faint ? 1 : 1.5,
        points: { show: !!s.points, size: 5 },
        spanGaps: !s.points,
        value: (u, v) => (v === null || v === undefined ? '–' : Number(v.toPrecision(5)).toString()),
      })),
    ],
  }, data, el);
  const onResize = () => u.setSize({ width: width(el), height: opts.height || 220 });
  window.addEventListener('resize', onResize);
  let zoomed = false;
  u.over.addEventListener('mouseup', () => { zoomed = true; });
  u.over.addEventListener('dblclick', () => { zoomed = false; });
  return {
    u,
    update(cols) { u.setData(cols, !zoomed); },
    destroy() { window.removeEventListener('resize', onResize); u.destroy(); },
  };
}

function hexAlpha(hex, a) {
  const n = parseInt(hex.slice(1), 16);
  return `rgba(${n >> 16},${(n >> 8) & 255},${n & 255},${a})`;
}

const SVG = 'http://www.w3.org/2000/svg';

// An inline SVG sparkline of `values` (nulls skipped).
export function sparkline(values, w = 90, h = 22) {
  const svg = document.createElementNS(SVG, 'svg');
  svg.setAttribute('width', w);
  svg.setAttribute('height', h);
  svg.setAttribute('class', 'spark');
  const vs = values.map((v, i) => [i, v]).filter(([, v]) => Number.isFinite(v));
  if (vs.length < 2) return svg;
  const min = Math.min(...vs.map((p) => p[1])), max = Math.max(...vs.map((p) => p[1]));
  const span = max - min || 1;
  const n = values.length - 1 || 1;
  const pts = vs.map(([i, v]) => `${((i / n) * (w - 2) + 1).toFixed(1)},${(h - 1 - ((v - min) / span) * (h - 2)).toFixed(1)}`);
  const line = document.createElementNS(SVG, 'polyline');
  line.setAttribute('points', pts.join(' '));
  line.setAttribute('fill', 'none');
  line.setAttribute('stroke', 'currentColor');
  line.setAttribute('stroke-width', '1.2');
  svg.appendChild(line);
  return svg;
}
