// Drives the dashboard in headless Chromium (see test_dashboard.py, which
// starts the daemon and agent and passes RM_* in the environment). Exits
// non-zero on the first failed check, printing what it saw.
import { createRequire } from 'node:module';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';

const require = createRequire(path.join(process.env.NODE_PATH, 'x.js'));
const { chromium } = require('playwright-core');

const URL_ = process.env.RM_URL;
const TOKEN = process.env.RM_TOKEN;
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

// A request from node with the admin token (the test's own view).
async function api(method, p) {
  const r = await fetch(URL_ + p, { method, headers: { Authorization: 'Bearer ' + TOKEN } });
  return { status: r.status, body: await r.json() };
}

// One raw request with a chosen Host header: its status.
function rawStatus(method, p, headers) {
  const u = new URL(URL_);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, method, path: p, headers }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode));
    });
    req.on('error', reject);
    req.end(method === 'POST' ? '{}' : undefined);
  });
}

// A page on another origin (another port of 127.0.0.1: same site, so a
// SameSite=Strict cookie still goes with its requests) that POSTs a cancel.
function evilServer(target) {
  const html = `<!doctype html><title>evil</title><script>
    fetch(${JSON.stringify(target)}, { method: 'POST', credentials: 'include', mode: 'no-cors' })
      .then(() => { document.title = 'sent'; }, () => { document.title = 'sent'; });
    </script>`;
  const srv = http.createServer((req, res) => { res.setHeader('Content-Type', 'text/html'); res.end(html); });
  return new Promise((resolve) => srv.listen(0, '127.0.0.1', () => resolve(srv)));
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
    // ---- the login page: a wrong token refused, the admin token signs in ----
    phase = 'login';
    await page.goto(URL_ + '/#/jobs');
    await page.waitForSelector('#login');
    await shot('login');
    await page.fill('#login-token', 'rmt_' + 'x'.repeat(43));
    await page.click('#login button[type=submit]');
    await page.waitForFunction(() => document.querySelector('#login-error').textContent.includes('not known'));
    await page.fill('#login-token', TOKEN);
    await page.click('#login button[type=submit]');
    phase = 'jobs';
    await page.waitForSelector('#jobs tbody tr');
    const cookie = (await ctx.cookies(URL_)).find((c) => c.name === 'rm_session');
    check(cookie && cookie.httpOnly && cookie.sameSite === 'Strict' && cookie.path === '/', 'session cookie: ' + JSON.stringify(cookie));
    check(!(await page.evaluate(() => document.cookie)).includes('rm_session'), 'the page can read the session cookie');
    log('signed in through the login page');

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

    // ---- a cross-origin page POSTs a cancel with the cookie: refused ----
    phase = 'csrf';
    const evil = await evilServer(URL_ + '/v1/jobs/' + encodeURIComponent(job) + '/cancel');
    const evilPage = await ctx.newPage();
    const answers = [];
    evilPage.on('response', (r) => { if (r.url().includes('/cancel')) answers.push(r.status()); });
    await evilPage.goto(`http://127.0.0.1:${evil.address().port}/`);
    await evilPage.waitForFunction(() => document.title === 'sent', null, { timeout: 10000 });
    await evilPage.close();
    evil.close();
    const still = await api('GET', '/v1/jobs/' + encodeURIComponent(job));
    check(still.body.state === 'running', 'a cross-origin POST changed the job: ' + still.body.state);
    log('cross-origin cancel refused (answers seen: ' + JSON.stringify(answers) + ')');
    // the same with the cookie and a forged Origin, no CSRF header
    const sessCookie = 'rm_session=' + cookie.value;
    const cancelPath = '/v1/jobs/' + encodeURIComponent(job) + '/cancel';
    let st = await rawStatus('POST', cancelPath, { Cookie: sessCookie, Origin: 'http://evil.example' });
    check(st === 403, 'forged Origin with the cookie: ' + st);
    st = await rawStatus('POST', cancelPath, { Cookie: sessCookie });
    check(st === 403, 'the cookie without X-CSRF-Token: ' + st);
    // DNS rebinding: the cookie with a Host that is not the coordinator's
    st = await rawStatus('GET', '/v1/jobs', { Cookie: sessCookie, Host: 'evil.example:' + new URL(URL_).port });
    check(st === 421, 'the cookie with a foreign Host: ' + st);
    st = await rawStatus('POST', '/v1/session', { Host: 'evil.example', 'Content-Type': 'application/json' });
    check(st === 421, 'sign-in with a foreign Host: ' + st);
    check((await api('GET', '/v1/jobs/' + encodeURIComponent(job))).body.state === 'running', 'the job changed');
    log('forged Origin, missing CSRF and foreign Host refused');
    phase = 'cancel';

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
    const cancelled = await api('GET', '/v1/jobs/' + encodeURIComponent(job));
    check(cancelled.body.cancelled_by === 'admin', 'cancelled_by: ' + cancelled.body.cancelled_by);

    // ---- sign in with a one-time code, as `ringctl dashboard` prints it ----
    phase = 'code';
    await page.click('#signout');
    await page.waitForSelector('#login');
    const code = (await api('POST', '/v1/session/codes')).body.code;
    check(/^rmc_/.test(code), 'login code ' + code);
    await page.goto(URL_ + '/?code=' + encodeURIComponent(code) + '#/workers');
    await page.waitForSelector('#workers');
    check(!page.url().includes('code='), 'the code stayed in the address bar: ' + page.url());
    log('signed in by a one-time code; the address is ' + page.url());
    await ctx.clearCookies();
    await page.goto(URL_ + '/?code=' + encodeURIComponent(code) + '#/jobs');
    await page.waitForSelector('#login');
    const used = await page.textContent('#login-error');
    check(/already used/.test(used), 'a reused code: ' + used);
    log('a used code is refused');

    const bad400 = (e) => e.phase === 'bad-spec' && /status of 400/.test(e.text);
    const want401 = (e) => ['login', 'code'].includes(e.phase) && /status of 401/.test(e.text);
    const unexpected = errors.filter((e) => !bad400(e) && !want401(e));
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
