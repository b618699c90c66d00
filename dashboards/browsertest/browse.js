// Drives the system chromium (puppeteer-core: no browser is downloaded) through Grafana's web
// frontend as a user: logs in through the form, opens pages and reports what it saw as JSON;
// dashboards' TestDashboardsInABrowser judges the report. It asserts nothing itself.
//
// usage: node browse.js SPEC.json REPORT.json
//   SPEC: {base, user, password, chromium, pages: [{name, path, screenshot?, variables?}],
//          editor?: {path, types: [{type, fields: {name: value}}]}, config?: {path}}
//   REPORT: {login: [...], pages: [{name, url, console, failed, http, queries, panels,
//            variables, plots}], editor: [...], config: {...}}
'use strict';
const puppeteer = require('puppeteer-core');
const fs = require('fs');

const [specPath, reportPath] = process.argv.slice(2);
const spec = JSON.parse(fs.readFileSync(specPath, 'utf8'));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const WIDTH = 1400;

// what the page did since the last reset: console errors (with where they came from), failed
// and aborted requests, answers >= 400, and every /api/ds/query with its answer's errors and
// notices per refId
function recorder(page) {
  const r = { console: [], failed: [], http: [], queries: [], pending: new Set() };
  page.on('console', (m) => {
    if (m.type() !== 'error') return;
    const where = [m.location() && m.location().url].concat((m.stackTrace() || []).map((f) => f.url)).filter(Boolean);
    r.console.push({ text: m.text(), where: where });
  });
  page.on('pageerror', (e) => r.console.push({ text: 'pageerror: ' + e.message, where: [String(e.stack || '')] }));
  page.on('requestfailed', (q) => {
    r.pending.delete(q);
    r.failed.push({ url: q.url(), error: (q.failure() && q.failure().errorText) || '', body: q.postData() || '' });
  });
  page.on('request', (q) => {
    if (q.url().includes('/api/ds/query')) r.pending.add(q);
  });
  page.on('response', async (resp) => {
    const q = resp.request();
    if (resp.status() >= 400) r.http.push({ url: q.url(), status: resp.status(), body: q.postData() || '' });
    if (!q.url().includes('/api/ds/query')) return;
    let sent = {};
    try {
      sent = JSON.parse(q.postData() || '{}');
    } catch (e) {}
    const rec = { status: resp.status(), queries: sent.queries || [], results: {} };
    r.queries.push(rec);
    try {
      const body = await resp.json();
      for (const [ref, res] of Object.entries(body.results || {})) {
        const notices = [];
        let rows = 0;
        let setup = 0; // rows of berm's own sandbox set-up (phase "setup")
        const titles = []; // the node graph's node titles, the log lines' bodies
        for (const f of res.frames || []) {
          for (const n of (f.schema && f.schema.meta && f.schema.meta.notices) || []) notices.push(n);
          if (f.data && f.data.values && f.data.values[0]) rows += f.data.values[0].length;
          const fields = (f.schema && f.schema.fields) || [];
          fields.forEach((fd, i) => {
            const vals = (f.data && f.data.values && f.data.values[i]) || [];
            if (fd.name === 'phase') setup += vals.filter((v) => v === 'setup').length;
            if (fd.name === 'title' || fd.name === 'body') titles.push(...vals.slice(0, 50).map(String));
          });
        }
        rec.results[ref] = { error: res.error || '', status: res.status || 0, notices: notices, rows: rows, setup: setup, titles: titles,
          queryType: ((sent.queries || []).find((x) => x.refId === ref) || {}).queryType || '' };
      }
    } catch (e) {
      rec.bodyError = String(e);
    }
    r.pending.delete(q);
  });
  r.reset = () => {
    r.console = [];
    r.failed = [];
    r.http = [];
    r.queries = [];
  };
  r.take = () => ({ console: r.console, failed: r.failed, http: r.http, queries: r.queries });
  return r;
}

// settle waits until no datasource query is in flight and no panel shows its loading bar, for
// 1.5 s on end (Grafana Live's websocket keeps the network from ever being idle)
async function settle(page, rec) {
  let quiet = 0;
  for (let i = 0; i < 240 && quiet < 3; i++) {
    await sleep(500);
    const loading = await page.$$eval('[aria-label="Panel loading bar"]', (e) => e.length).catch(() => 0);
    quiet = !loading && rec.pending.size === 0 ? quiet + 1 : 0;
  }
}

// every panel's title, error badge, "No data" and text; every uPlot's y scales and the pixels
// between its adjacent x values (found through React's fiber: the UPlotChart whose state holds it)
async function panels(page) {
  return page.evaluate(() => {
    const out = [];
    document.querySelectorAll('.react-grid-item').forEach((item) => {
      const header = item.querySelector('[data-testid^="data-testid Panel header "]');
      const title = header ? header.getAttribute('data-testid').replace('data-testid Panel header ', '') : '';
      const status = item.querySelector('[aria-label="Panel status"], [data-testid="data-testid Panel status error"]');
      let statusText = '';
      if (status) statusText = status.getAttribute('title') || status.getAttribute('aria-label') || 'error';
      // notices: buttons and tooltips in the header other than the menu
      const text = (item.innerText || '').replace(/\s+/g, ' ').trim();
      const noData = Array.from(item.querySelectorAll('.panel-empty, p, div')).some((e) => e.children.length === 0 && e.textContent.trim() === 'No data');
      const plots = [];
      item.querySelectorAll('.uplot').forEach((u) => {
        const host = u.parentElement; // uPlot makes .uplot itself; React rendered its container
        const key = host && Object.keys(host).find((k) => k.startsWith('__reactFiber'));
        let f = key && host[key];
        let plot = null;
        for (let i = 0; f && i < 40 && !plot; i++, f = f.return) {
          const s = f.stateNode;
          if (s && s.state && s.state.plot && s.state.plot.scales) plot = s.state.plot; // UPlotChart's state
          else if (s && s.plotInstance && s.plotInstance.current) plot = s.plotInstance.current;
        }
        if (!plot) {
          plots.push({ found: false });
          return;
        }
        const xs = plot.data[0] || [];
        let minDx = Infinity;
        for (let i = 1; i < xs.length; i++) minDx = Math.min(minDx, xs[i] - xs[i - 1]);
        const xsc = plot.scales.x;
        const width = plot.bbox.width / (window.devicePixelRatio || 1);
        const scales = {};
        for (const [k, s] of Object.entries(plot.scales)) if (k !== 'x') scales[k] = { min: s.min, max: s.max };
        const series = plot.series.slice(1).map((s, i) => {
          const vals = (plot.data[i + 1] || []).filter((v) => v != null);
          return { label: s.label, scale: s.scale, max: vals.length ? Math.max.apply(null, vals) : null, points: vals.length };
        });
        plots.push({
          found: true, points: xs.length, width: width,
          minStepPx: xs.length > 1 && xsc.max > xsc.min ? (minDx / (xsc.max - xsc.min)) * width : null,
          scales: scales, series: series,
        });
      });
      out.push({ title: title, status: statusText, noData: noData, text: text.slice(0, 4000), plots: plots });
    });
    return out;
  });
}

// every variable picker's options: opened, read, closed
async function variables(page) {
  const out = [];
  const items = await page.$$('[data-testid="data-testid template variable"]');
  for (const item of items) {
    const name = await item.$eval('label', (l) => l.textContent.trim()).catch(() => '');
    const button = await item.$('[data-testid^="data-testid Dashboard template variables Variable Value DropDown value link text "]');
    if (!button) {
      out.push({ name: name, picker: false });
      continue;
    }
    const current = await button.evaluate((b) => b.innerText.trim());
    await button.click();
    await page.waitForSelector('[data-testid^="data-testid Dashboard template variables Variable Value DropDown option text "]', { timeout: 5000 }).catch(() => {});
    await sleep(300);
    if (process.env.BROWSE_DEBUG) await page.screenshot({ path: `/tmp/var-${name}-open.png` });
    const options = await page.$$eval('[data-testid^="data-testid Dashboard template variables Variable Value DropDown option text "]',
      (os) => os.map((o) => o.innerText.trim()));
    // closed: Escape, else a click on the picker's label (a multi-value picker with no
    // options keeps its list open on Escape)
    const gone = () => page.waitForFunction(() => !document.querySelector('[aria-label="Variable options"], [data-testid^="data-testid Dashboard template variables Variable Value DropDown option text "]'), { timeout: 2000 }).then(() => true, () => false);
    await page.keyboard.press('Escape');
    if (!(await gone())) {
      const label = await item.$('label');
      if (label) await label.click().catch(() => {});
      await gone();
    }
    await sleep(200);
    if (process.env.BROWSE_DEBUG) await page.screenshot({ path: `/tmp/var-${name}.png` });
    out.push({ name: name, picker: true, current: current, options: options });
  }
  return out;
}

async function scrollThrough(page) {
  // panels load when they scroll into view
  await page.evaluate(async () => {
    const sc = document.querySelector('.scrollbar-view') || document.scrollingElement;
    for (let y = 0; y < sc.scrollHeight; y += 500) {
      sc.scrollTop = y;
      await new Promise((r) => setTimeout(r, 300));
    }
    sc.scrollTop = 0;
  }).catch(() => {});
}

async function openDashboard(page, rec, p) {
  rec.reset();
  await page.setViewport({ width: WIDTH, height: 900 });
  await page.goto(spec.base + p.path, { waitUntil: 'load', timeout: 120000 }).catch(() => {});
  await page.waitForSelector('.react-grid-item', { timeout: 120000 }).catch(() => {});
  // as tall as the dashboard, so every panel is in view (and in the screenshot)
  await scrollThrough(page);
  const h = await page.evaluate(() => {
    const sc = document.querySelector('.scrollbar-view');
    return sc ? sc.scrollHeight + 80 : document.body.scrollHeight;
  });
  await page.setViewport({ width: WIDTH, height: Math.max(900, Math.min(h, 5000)) });
  await settle(page, rec);
  const result = { name: p.name, url: page.url(), panels: await panels(page) };
  // Grafana's error toasts (a variable's failed refresh shows here, not on a panel)
  result.toasts = await page.$$eval('[data-testid="data-testid Alert error"]', (as) => as.filter((a) => a.offsetParent !== null).map((a) => a.innerText.trim())).catch(() => []);
  if (p.screenshot) {
    await page.mouse.move(1, 1); // no tooltip or hover header in the picture
    await page.screenshot({ path: p.screenshot });
  }
  // links to berm's dashboards: the panels' data links, and the dashboard links' dropdown opened
  await page.click('[data-testid="data-testid Dashboard link dropdown"]').catch(() => {});
  await sleep(500);
  result.links = await page.$$eval('a[href*="/d/berm-"]', (as) => as.map((a) => ({ href: a.getAttribute('href'), text: a.innerText.trim() })));
  await page.keyboard.press('Escape');
  if (p.variables) result.variables = await variables(page);
  await settle(page, rec);
  return Object.assign(result, rec.take());
}

// the plugin's query editor in Explore: each query type chosen in its Select (which runs it),
// its fields typed, Run clicked; what the query answered and the page showed
async function editor(page, rec, e) {
  const out = [];
  await page.setViewport({ width: WIDTH, height: 1200 });
  await page.goto(spec.base + e.path, { waitUntil: 'load', timeout: 120000 }).catch(() => {});
  await page.waitForSelector('#berm-A-type', { timeout: 120000 });
  for (const t of e.types) {
    rec.reset();
    await page.click('#berm-A-type');
    await page.type('#berm-A-type', t.type);
    await sleep(200);
    await page.keyboard.press('Enter');
    await settle(page, rec);
    const typed = [];
    for (const [f, v] of Object.entries(t.fields || {})) {
      const sel = '#berm-A-' + f;
      if (!(await page.$(sel))) continue;
      await page.click(sel, { clickCount: 3 });
      await page.type(sel, v);
      typed.push(f);
    }
    if (typed.length) {
      rec.reset();
      await page.evaluate(() => {
        const b = Array.from(document.querySelectorAll('button')).find((x) => x.innerText.trim() === 'Run');
        if (b) b.click();
      });
      await settle(page, rec);
    }
    const shown = await page.$$eval('input[id^="berm-A-"]', (is) => is.map((i) => i.id.replace('berm-A-', '')));
    // what Explore shows of a query's error
    const alerts = await page.$$eval('[data-testid^="data-testid Alert error"], [aria-label="Query error"]', (as) => as.map((a) => a.innerText.trim())).catch(() => []);
    if (t.screenshot) await page.screenshot({ path: t.screenshot });
    out.push(Object.assign({ type: t.type, typed: typed, fields: shown, alerts: alerts }, rec.take()));
  }
  if (e.screenshot) await page.screenshot({ path: e.screenshot });
  return out;
}

// the datasource's config page: its labels' overflow, then Save & test
async function config(page, rec, c) {
  rec.reset();
  await page.setViewport({ width: WIDTH, height: 1000 });
  await page.goto(spec.base + c.path, { waitUntil: 'load', timeout: 120000 }).catch(() => {});
  await page.waitForSelector('#berm-config-dsn', { timeout: 120000 });
  // a label's content (its text and tooltip icon) against its box
  const labels = await page.$$eval('label[for^="berm-config-"]', (ls) => ls.map((l) => {
    const box = l.getBoundingClientRect();
    const r = document.createRange();
    r.selectNodeContents(l);
    const c = r.getBoundingClientRect();
    return {
      for: l.getAttribute('for'), text: l.innerText.trim(), scrollWidth: l.scrollWidth, clientWidth: l.clientWidth,
      scrollHeight: l.scrollHeight, clientHeight: l.clientHeight,
      spill: Math.max(0, c.right - box.right, box.left - c.left, c.bottom - box.bottom, box.top - c.top),
    };
  }));
  const dsn = await page.$eval('#berm-config-dsn', (i) => i.value);
  await page.click('[data-testid="data-testid Data source settings page Save and Test button"]');
  await page.waitForSelector('[aria-label="Data source settings page Alert"]', { timeout: 60000 }).catch(() => {});
  await settle(page, rec);
  const alert = await page.$eval('[aria-label="Data source settings page Alert"]', (a) => a.innerText.trim()).catch(() => '');
  if (c.screenshot) await page.screenshot({ path: c.screenshot });
  return Object.assign({ labels: labels, dsn: dsn, alert: alert }, rec.take());
}

(async () => {
  const browser = await puppeteer.launch({
    executablePath: spec.chromium,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--hide-scrollbars'],
    defaultViewport: { width: WIDTH, height: 900 },
  });
  const report = { pages: [] };
  try {
    const page = await browser.newPage();
    const rec = recorder(page);
    await page.goto(spec.base + '/login', { waitUntil: 'load', timeout: 180000 });
    await page.waitForSelector('input[name="user"]', { timeout: 180000 });
    await page.type('input[name="user"]', spec.user);
    await page.type('input[name="password"]', spec.password);
    await Promise.all([
      page.waitForNavigation({ waitUntil: 'load', timeout: 120000 }).catch(() => {}),
      page.click('button[type="submit"]'),
    ]);
    report.login = rec.take();
    const t0 = Date.now();
    const took = (what) => console.log(`${what}: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    took('login');
    for (const p of spec.pages || []) {
      report.pages.push(await openDashboard(page, rec, p));
      took(p.name);
    }
    if (spec.editor) report.editor = await editor(page, rec, spec.editor);
    took('editor');
    if (spec.config) report.config = await config(page, rec, spec.config);
    took('config');
  } catch (e) {
    report.fatal = String((e && e.stack) || e);
  } finally {
    fs.writeFileSync(reportPath, JSON.stringify(report, null, 1));
    await browser.close();
  }
})();
