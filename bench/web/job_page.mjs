// The browser half of bench/web/job_page.py: open the job page RM_RUNS
// times in fresh tabs; print {"loads_ms": [...], "points": N, "errors": [...]}.
import { createRequire } from 'node:module';
import path from 'node:path';

const require = createRequire(path.join(process.env.NODE_PATH, 'x.js'));
const { chromium } = require('playwright-core');

const ctx = await chromium.launchPersistentContext(process.env.RM_PROFILE, {
  executablePath: '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  viewport: { width: 1280, height: 900 },
});
// signed in once (the session cookie, shared by the context's tabs)
const signin = await ctx.request.post(`${process.env.RM_URL}/v1/session`, { data: { token: process.env.RM_TOKEN } });
if (signin.status() !== 200) throw new Error('sign-in: HTTP ' + signin.status());
const loads = [];
let cold = null;
const errors = [];
let points = 0;
for (let i = -1; i < Number(process.env.RM_RUNS || 5); i++) {
  const page = await ctx.newPage();
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('pageerror', (e) => errors.push(e.message));
  await page.goto(`${process.env.RM_URL}/#/jobs/${process.env.RM_JOB}`);
  await page.waitForFunction(() => Number(document.querySelector('#chart-loss')?.dataset.points || 0) > 0, null, { timeout: 30000 });
  const t = await page.evaluate(() => new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(() => r(performance.now())))));
  points = await page.evaluate(() => Number(document.querySelector('#chart-loss').dataset.points));
  if (i < 0) cold = t; else loads.push(t);
  await page.close();
}
await ctx.close();
console.log(JSON.stringify({ cold_ms: cold, loads_ms: loads, points, errors }));
