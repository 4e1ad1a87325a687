// pages_submit: a JSON editor prefilled with the default job
// (jobs/default.json, embedded as /assets/default.json); POST /v1/jobs; a
// refusal's message shown at the field its JSON pointer names.

import { h } from './app.js';
import { post, enc } from './api.js';
import { pointerPosition } from './logic.js';

export function submitPage(main) {
  const area = h('textarea', { class: 'spec', id: 'spec', spellcheck: false, 'aria-label': 'job spec (JSON)' });
  const errBox = h('div', { id: 'submit-error', role: 'alert' });
  const button = h('button', { id: 'submit', onclick: () => submit() }, 'Submit');
  const reset = h('button', { onclick: () => load() }, 'Reset to the default job');
  main.append(h('h1', {}, 'Submit a job'),
    h('p', { class: 'muted' }, 'The job spec as JSON (see docs/jobspec.md). The coordinator checks it and names the field at fault.'),
    errBox, area, h('div', { class: 'bar' }, button, reset));

  const load = async () => {
    const r = await fetch('/assets/default.json');
    area.value = await r.text();
    errBox.replaceChildren();
  };

  const showError = (detail, pointer) => {
    const text = area.value;
    const pos = pointer !== undefined && pointer !== null ? pointerPosition(text, pointer) : null;
    const where = pos ? `line ${pos.line}, column ${pos.col}` : null;
    let excerpt = null;
    if (pos) {
      const lines = text.split('\n');
      excerpt = h('pre', {}, `${pos.line} | ${lines[pos.line - 1]}\n${' '.repeat(String(pos.line).length + 3 + pos.col - 1)}^`);
      area.focus();
      area.setSelectionRange(pos.start, pos.missing ? pos.start : pos.end);
      // scroll the selection into view
      const lineHeight = parseFloat(getComputedStyle(area).lineHeight) || 18;
      area.scrollTop = Math.max(0, (pos.line - 3) * lineHeight);
    }
    errBox.replaceChildren(h('div', { class: 'fielderr' },
      h('strong', { class: 'error' }, detail),
      pointer ? h('div', {}, 'field ', h('code', { class: 'pointer' }, pointer),
        where ? ` (${where}${pos.missing ? ', where the field is missing' : ''})` : '') : null,
      excerpt));
  };

  const submit = async () => {
    let body = area.value;
    try { JSON.parse(body); } catch (e) {
      showError('not valid JSON: ' + e.message, null);
      return;
    }
    button.disabled = true;
    const r = await post('/v1/jobs', body);
    button.disabled = false;
    if (r.status === 201 || r.status === 200) {
      location.hash = '#/jobs/' + enc(r.body.id);
      return;
    }
    const p = r.body || {};
    showError(p.detail || `the coordinator answered ${r.status}`, p.pointer);
  };
  load();
  return { stop() {} };
}
