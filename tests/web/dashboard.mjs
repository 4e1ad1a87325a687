// Drives the dashboard in headless Chromium (see test_dashboard.py, which
// starts the daemon and agent and passes RM_* in the environment). Exits
// non-zero on the first failed check, printing what it saw.
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';

const require = createRequire(path.join(process.env.NODE_PATH, 'x.js'));
const { chromium } = require('playwright-core');

const URL_ = process.env.RM_URL;
const SHOTS = process.env.RM_SHOTS;
const t0 = Date.now();
const log = (m) => console.log(`${((Date.now() - t0) / 1000).toFixed(1)}s ${m}`);
function check(cond, msg) { if (!cond) throw new Error(msg); }

// ranks of a job: `ringworker rank ... --job ID --rank R` processes in /proc
function rankPid(job, rank) {
  for (const d of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    let argv, stat;
    try {
      argv = fs.readFileSync(`/proc/${d}/cmdline`, 'latin1').split('\0');
      stat = fs.readFileSync(`/proc/${d}/stat`, 'latin1');
    } catch { continue; }
    if (argv.length < 2 || argv[1] !== 'rank' || !argv[0].endsWith('ringworker')) continue;
    if (stat.slice(stat.lastIndexOf(')') + 2).startsWith('Z')) continue;
    const j = argv.indexOf('--job'), r = argv.indexOf('--rank');
    if (argv[j + 1] === job && argv[r + 1] === String(rank)) return Number(d);
  }
  return null;
}

async function main() {
  const ctx = await chromium.launchPersistentContext(process.env.RM_PROFILE, {
    executablePath: process.env.RM_CHROMIUM,
    headless: true,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
    viewport: { width: 1280, height: 900 },
  });
  const page = ctx.pages()[0] || await ctx.newPage();
  const errors = [];
  let phase = 'start';
  page.on('console', (m) => { if (m.type() === 'error') errors.push({ phase, text: m.text() }); });
  page.on('pageerror', (e) => errors.push({ phase, text: 'pageerror: ' + e.message }));
  // only requests to the daemon: nothing from elsewhere
  const foreign = [];
  page.on('request', (r) => { if (!r.url().startsWith(URL_) && !r.url().startsWith('data:')) foreign.push(r.url()); });
  const shot = async (name) => page.screenshot({ path: path.join(SHOTS, name + '.png'), fullPage: true });

  try {
    // ---- jobs (empty) ----
    await page.goto(URL_ + '/#/jobs');
    await page.waitForSelector('#jobs tbody tr');
    log('jobs page up');

    // ---- submit: default job prefilled, a bad spec, then a good one ----
    await page.goto(URL_ + '/#/submit');
    await page.waitForFunction(() => document.querySelector('#spec').value.includes('"world_size"'));
    const prefilled = await page.inputValue('#spec');
    check(prefilled.includes('default-fortunes'), 'editor not prefilled with jobs/default.json: ' + prefilled.slice(0, 80));
    await shot('submit');
    phase = 'bad-spec';
    const bad = JSON.stringify(JSON.parse(process.env.RM_SPEC_BAD), null, 2);
    await page.fill('#spec', bad);
    await page.click('#submit');
    await page.waitForSelector('#submit-error .pointer');
    const ptr = await page.textContent('#submit-error .pointer');
    check(ptr === '/train/steps', 'error pointer ' + ptr);
    const errText = await page.textContent('#submit-error');
    check(/train\.steps/.test(errText) && /line \d+, column \d+/.test(errText), 'error text: ' + errText);
    const sel = await page.evaluate(() => { const a = document.querySelector('#spec'); return a.value.slice(a.selectionStart, a.selectionEnd); });
    check(sel.startsWith('"steps"'), 'the editor does not select the field at fault: ' + JSON.stringify(sel));
    await shot('submit-error');
    log('bad spec shown at ' + ptr);
    phase = 'submit';
    await page.fill('#spec', JSON.stringify(JSON.parse(process.env.RM_SPEC_LONG), null, 2));
    await page.click('#submit');
    await page.waitForURL(/#\/jobs\/j-/);
    const job = decodeURIComponent(page.url().split('#/jobs/')[1]);
    log('submitted ' + job);

    // ---- the job page: the loss chart gains points live ----
    const points = () => page.evaluate(() => Number(document.querySelector('#chart-loss').dataset.lastStep || 0));
    await page.waitForFunction(() => Number(document.querySelector('#chart-loss').dataset.lastStep || 0) >= 15, null, { timeout: 120000 });
    const p1 = await points();
    await page.waitForFunction((p) => Number(document.querySelector('#chart-loss').dataset.lastStep) > p + 5, p1, { timeout: 60000 });
    log(`loss chart grew live: step ${p1} -> ${await points()}`);
    check(await page.locator('#chart-loss canvas').count() > 0, 'no loss chart canvas');

    // ---- kill rank 1: the recovery on the timeline, the job goes on ----
    await page.waitForSelector('#checkpoints tbody tr code', { timeout: 60000 });
    const pid = rankPid(job, 1);
    check(pid, 'no rank 1 process of ' + job);
    const killedAt = await points();
    process.kill(pid, 'SIGKILL');
    log(`killed rank 1 (pid ${pid}) at step ~${killedAt}`);
    await page.waitForSelector('#timeline li[data-type="recovered"]', { timeout: 90000 });
    const rec = await page.textContent('#timeline li[data-type="recovered"]');
    check(/recovered from/.test(rec) && /detection \d+ ms/.test(rec), 'recovered entry: ' + rec);
    check(await page.locator('#timeline li[data-type="recovered"] .phases span').count() >= 5, 'no phase bar');
    check(await page.locator('#timeline li[data-type="recovering"]').count() >= 1, 'no recovering entry');
    const after = await points();
    await page.waitForFunction((p) => Number(document.querySelector('#chart-loss').dataset.lastStep) > p + 5, after, { timeout: 60000 });
    await page.waitForFunction(() => document.querySelector('#job-state').textContent === 'running');
    log('recovered and going on: ' + rec.slice(0, 120));
    const exportLine = await page.textContent('#checkpoints tbody tr code');
    check(exportLine.startsWith(`ringctl export ${job} --step `), 'export line: ' + exportLine);
    // logs: lines with follow and the rank filter where the daemon serves
    // GET /v1/jobs/{id}/logs, else "no logs yet"
    const routes = await (await fetch(URL_ + '/assets/routes.json')).json();
    if (routes.routes.some((r) => r.path === '/v1/jobs/{id}/logs')) {
      await page.waitForFunction(() => document.querySelectorAll('#logs > div').length > 0, null, { timeout: 30000 });
      const n0 = await page.locator('#logs > div').count();
      await page.waitForFunction((n) => document.querySelectorAll('#logs > div').length > n, n0, { timeout: 30000 });
      await page.selectOption('#log-rank', '1');
      await page.waitForFunction(() => { const l = [...document.querySelectorAll('#logs > div .r')]; return l.length > 0 && l.every((x) => x.textContent === '[1] '); }, null, { timeout: 30000 });
      await page.selectOption('#log-rank', '');
      log('logs followed, rank filter works');
    } else {
      check((await page.textContent('#logs')).includes('no logs yet'), 'logs panel without "no logs yet"');
    }
    await page.waitForTimeout(500);
    await shot('job');

    // ---- workers ----
    await page.goto(URL_ + '/#/workers');
    await page.waitForFunction((j) => document.querySelector('#workers').textContent.includes(j), job);
    const wtext = await page.textContent('#workers');
    check(wtext.includes('node-a') && /rank 0/.test(wtext) && /rank 1/.test(wtext), 'workers: ' + wtext);
    await shot('workers');

    // ---- jobs: the row, the filter ----
    await page.goto(URL_ + '/#/jobs');
    await page.waitForSelector(`#jobs tr[data-job="${job}"] .spark polyline`, { timeout: 20000 });
    const row = await page.textContent(`#jobs tr[data-job="${job}"]`);
    check(/running/.test(row) && /\d+ \/ 3000/.test(row), 'jobs row: ' + row);
    await shot('jobs');
    await page.selectOption('#state-filter', 'succeeded');
    check(await page.locator(`#jobs tr[data-job="${job}"]`).count() === 0, 'filter kept a running job');
    await page.selectOption('#state-filter', 'running');
    check(await page.locator(`#jobs tr[data-job="${job}"]`).count() === 1, 'filter dropped the running job');

    // ---- phone width ----
    await page.setViewportSize({ width: 390, height: 844 });
    await page.goto(URL_ + '/#/jobs/' + encodeURIComponent(job));
    await page.waitForFunction(() => Number(document.querySelector('#chart-loss').dataset.points || 0) > 0);
    const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    check(overflow <= 1, 'page wider than a phone: ' + overflow + ' px');
    await shot('job-phone');
    await page.setViewportSize({ width: 1280, height: 900 });

    // ---- cancel, with the confirmation ----
    await page.click('#cancel');
    check(await page.isVisible('#confirm-cancel'), 'no confirmation dialog');
    await page.click('#confirm-no');
    await page.waitForTimeout(1000);
    check(await page.textContent('#job-state') !== 'cancelled', 'cancelled without confirming');
    await page.click('#cancel');
    await page.click('#confirm-yes');
    await page.waitForFunction(() => document.querySelector('#job-state').textContent === 'cancelled', null, { timeout: 30000 });
    log('cancelled from the page');

    const bad400 = (e) => e.phase === 'bad-spec' && /status of 400/.test(e.text);
    const unexpected = errors.filter((e) => !bad400(e));
    check(unexpected.length === 0, 'console errors: ' + JSON.stringify(unexpected));
    check(foreign.length === 0, 'requests to elsewhere: ' + JSON.stringify(foreign));
    log('ok');
  } catch (e) {
    console.log('FAIL: ' + e.message);
    console.log('console errors: ' + JSON.stringify(errors));
    try { await shot('failure'); } catch { /* ignore */ }
    await ctx.close();
    process.exit(1);
  }
  await ctx.close();
}

main().catch((e) => { console.log('FAIL: ' + (e.stack || e)); process.exit(1); });
