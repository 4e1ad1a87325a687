// stream: a live view fed by the coordinator's Server-Sent Events when it
// serves them (docs/coordinator.md "Live streams": GET /v1/jobs/{id}/stream, GET /v1/stream), else by
// polling its REST routes every 2 s. On a stream error it polls until the
// stream opens again (reconnects back off, resume after the last event id:
// logic.js's StreamBook); an `event: reset` reloads the state over REST.

import { StreamBook } from './logic.js';
import { has } from './api.js';

export const POLL_MS = 2000;

export class Live {
  // url: the stream's path; template: its route row ("/v1/jobs/{id}/stream");
  // handlers: {type: fn(data)}; poll: async fn() reloading over REST;
  // onMode(mode): 'live' | 'polling' | 'ended'.
  constructor({ url, template, handlers, poll, onMode = () => {}, pollMs = POLL_MS, book = new StreamBook() }) {
    Object.assign(this, { baseUrl: url, template, handlers, poll, onMode, pollMs });
    this.book = book;
    this.es = null;
    this.timer = null;
    this.retry = null;
    this.stopped = false;
    this.ended = false;
  }

  async start() {
    await this.poll();
    if (this.stopped) return;
    if (await has('GET', this.template)) this.open();
    else this.startPolling();
  }

  stop() {
    this.stopped = true;
    if (this.es) this.es.close();
    clearInterval(this.timer);
    clearTimeout(this.retry);
  }

  open() {
    if (this.stopped || this.ended) return;
    const es = new EventSource(this.book.url(this.baseUrl));
    this.es = es;
    es.onopen = () => {
      this.book.opened();
      this.stopPolling();
      this.onMode('live');
    };
    for (const type of Object.keys(this.handlers).filter((t) => t !== 'end' && t !== 'reset')) {
      es.addEventListener(type, (e) => {
        if (!this.book.accept(e.lastEventId)) return;
        let data = null;
        try { data = JSON.parse(e.data); } catch { return; }
        this.handlers[type](data);
      });
    }
    es.addEventListener('reset', () => {
      this.book.reset();
      this.poll();
    });
    es.addEventListener('end', (e) => {
      let data = null;
      try { data = JSON.parse(e.data); } catch { /* keep null */ }
      if (this.handlers.end) this.handlers.end(data);
      this.ended = true;
      es.close();
      this.onMode('ended');
    });
    es.onerror = () => {
      if (this.ended || this.stopped) return;
      es.close();
      this.startPolling();
      clearTimeout(this.retry);
      this.retry = setTimeout(() => this.open(), this.book.failed());
    };
  }

  startPolling() {
    if (this.timer || this.stopped) return;
    this.onMode('polling');
    this.timer = setInterval(() => { this.poll(); }, this.pollMs);
  }

  stopPolling() {
    clearInterval(this.timer);
    this.timer = null;
  }
}
