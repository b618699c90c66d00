// Template variables and variable queries through @grafana/runtime's DataSourceWithBackend, the
// path Grafana's panels take: applyTemplateVariables with a TemplateSrv (templatesrv.js, standing
// in for Grafana core's), the /api/ds/query request the runtime builds, and metricFindQuery's
// decoding of the response Grafana returns. The Go test (TestFrontend) parses every recorded
// request with the backend's ParseModel and Params and checks it reads what was meant.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { load, loadModule, record, checkConsole } = require('./harness');
const fs = require('node:fs');
const path = require('node:path');
const { TemplateSrv } = require('./templatesrv');
const { BackendSrv, golden } = require('./backendsrv');

const runtime = load('@grafana/runtime');
const data = load('@grafana/data');
const rxjs = load('rxjs');

const { plugin } = loadModule();

const settings = {
  id: 7, uid: 'berm', type: 'berm-datasource', name: 'berm', access: 'proxy', readOnly: false,
  jsonData: { dsn: 'clickhouse://127.0.0.1:9000/berm' },
  meta: { id: 'berm-datasource', name: 'berm', type: 'datasource', backend: true, info: {}, module: 'plugins/berm-datasource/module', baseUrl: '' },
};
const ref = { uid: 'berm', type: 'berm-datasource' };

// The dashboard's variables: tool multi-valued, tenant on "All" with the custom all value the
// provisioned dashboards use, host on "All" without one, call single.
const variables = [
  { name: 'tool', type: 'query', multi: true, current: { value: ['git', 'curl'], text: ['git', 'curl'] }, options: [] },
  { name: 'tenant', type: 'query', includeAll: true, allValue: '*', current: { value: ['$__all'], text: ['All'] }, options: [{ value: '$__all' }, { value: 'acme' }] },
  { name: 'host', type: 'query', includeAll: true, current: { value: '$__all', text: 'All' }, options: [{ value: '$__all' }, { value: 'node-1' }, { value: 'node-2' }] },
  { name: 'call', type: 'query', current: { value: 'c-9', text: 'c-9' }, options: [] },
];
const templateSrv = new TemplateSrv(variables);
runtime.setTemplateSrv(templateSrv);
// Grafana core's DataSourceSrv, as far as the runtime's query() asks it: a panel's query names
// its datasource, and the runtime resolves the reference.
runtime.setDataSourceSrv({
  getInstanceSettings: (r) => (r && (r.uid === 'berm' || r === 'berm') ? settings : undefined),
  get: async () => ds,
  getList: () => [settings],
  reload: async () => {},
});
const ds = new plugin.DataSourceClass(settings);
test.afterEach(() => checkConsole());

const from = data.dateTime(1_799_996_400_000);
const to = data.dateTime(1_800_000_000_000);
const range = { from, to, raw: { from, to } };
const requests = [];

function respond(body) {
  const srv = new BackendSrv(() => body);
  runtime.setBackendSrv(srv);
  return srv;
}

// run sends one panel query through the runtime and gives the query as it left the browser.
async function run(name, target, scopedVars, want) {
  const srv = respond(golden('values-response.json'));
  await rxjs.lastValueFrom(ds.query({
    requestId: 'Q', interval: '1m', intervalMs: 60000, maxDataPoints: 1000, range, scopedVars: scopedVars || {},
    targets: [Object.assign({ refId: 'A', datasource: ref }, target)], timezone: 'utc', app: 'dashboard', startTime: 0,
  }));
  assert.equal(srv.requests.length, 1, `${name}: one request`);
  const req = srv.requests[0];
  assert.match(req.url, /^\/api\/ds\/query\b/);
  assert.equal(req.method, 'POST');
  assert.equal(req.data.from, '1799996400000');
  assert.equal(req.data.to, '1800000000000');
  const q = req.data.queries[0];
  assert.deepEqual(q.datasource, ref);
  requests.push({ name, query: q, want });
  return q;
}

test('the module exports a DataSourcePlugin of @grafana/data, as Grafana\'s importDataSourcePlugin wants', () => {
  assert.ok(plugin instanceof data.DataSourcePlugin);
  assert.ok(ds instanceof runtime.DataSourceWithBackend);
  assert.equal(typeof plugin.components.ConfigEditor, 'function');
  assert.equal(typeof plugin.components.QueryEditor, 'function');
  assert.deepEqual(ds.getRef(), ref);
});

test('multi-value, All and single variables interpolate as comma-separated lists', async () => {
  const q = await run('variables', { queryType: 'calls', tenant: '$tenant', tool: '${tool}', host: '[[host]]', call: '$call', text: 'cost $5', limit: 5 },
    {}, { Tenants: null, Tools: ['git', 'curl'], Hosts: ['node-1', 'node-2'], Call: 'c-9' });
  assert.equal(q.tenant, '*', 'All with a custom all value is that value');
  assert.equal(q.tool, 'git,curl');
  assert.equal(q.host, 'node-1,node-2', 'All without one is every option');
  assert.equal(q.call, 'c-9');
  assert.equal(q.text, 'cost $5', 'a dollar that names no variable is text');
  assert.equal(q.limit, 5);
});

test('a format the panel asks for wins over csv; repeated panels use their scoped value', async () => {
  const q = await run('glob format', { queryType: 'calls', tool: '${tool:glob}' }, {}, { Tenants: null, Tools: ['git', 'curl'], Hosts: null, Call: '' });
  assert.equal(q.tool, '{git,curl}');
  const r = await run('scoped', { queryType: 'calls', tool: '$tool' }, { tool: { text: 'curl', value: 'curl' } }, { Tenants: null, Tools: ['curl'], Hosts: null, Call: '' });
  assert.equal(r.tool, 'curl');
});

test('a variable that is not defined reaches the backend as written (which refuses it)', async () => {
  const q = await run('undefined variable', { queryType: 'calls', tool: '$nosuch' }, {}, null);
  assert.equal(q.tool, '$nosuch');
  requests.pop(); // the Go side checks the refusal in TestModelParams
});

test('a query without a type is not sent', async () => {
  const srv = respond(golden('values-response.json'));
  const r = await rxjs.lastValueFrom(ds.query({ requestId: 'Q', range, scopedVars: {}, targets: [{ refId: 'A' }], intervalMs: 60000, maxDataPoints: 10 }));
  assert.equal(srv.requests.length, 0);
  assert.deepEqual(r.data, []);
});

test('variable query as text (Grafana\'s editor for datasources without one)', async () => {
  const srv = respond(golden('values-response.json'));
  const found = await ds.metricFindQuery('tool', { range, scopedVars: {} });
  assert.deepEqual(found, [
    { text: 'git', value: 'git' }, { text: 'curl', value: 'curl' },
    { text: '<img src=x onerror=alert(1)>', value: '<img src=x onerror=alert(1)>' },
  ]);
  const q = srv.requests[0].data.queries[0];
  assert.equal(q.queryType, 'values');
  assert.equal(q.field, 'tool');
  requests.push({ name: 'variable query text', query: q, want: { Tenants: null, Tools: null, Hosts: null, Call: '' } });
});

test('variable query as a model interpolates the variables it depends on', async () => {
  const srv = respond(golden('values-response.json'));
  await ds.metricFindQuery({ field: 'call', tool: '$tool', tenant: '$tenant' }, { range, scopedVars: {} });
  const q = srv.requests[0].data.queries[0];
  assert.equal(q.tool, 'git,curl');
  assert.equal(q.field, 'call');
  assert.equal(srv.requests[0].data.from, '1799996400000');
  requests.push({ name: 'variable query model', query: q, want: { Tenants: null, Tools: ['git', 'curl'], Hosts: null, Call: '' } });
});

test('the provisioned dashboards\' variable queries', async () => {
  const dir = path.join(__dirname, '..', '..');
  const files = fs.readdirSync(dir).filter((f) => f.endsWith('.json'));
  let n = 0;
  for (const f of files) {
    const dash = JSON.parse(fs.readFileSync(path.join(dir, f), 'utf8'));
    for (const v of (dash.templating && dash.templating.list) || []) {
      if (v.type !== 'query') {
        continue;
      }
      const srv = respond(golden('values-response.json'));
      const found = await ds.metricFindQuery(v.query, { range, scopedVars: {} });
      assert.equal(found.length, 3, `${f} ${v.name}`);
      const q = srv.requests[0].data.queries[0];
      assert.equal(q.field, v.query.field);
      requests.push({ name: `${f} variable ${v.name}`, query: q, want: { Tenants: null, Tools: v.query.tool ? ['git', 'curl'] : null, Hosts: null, Call: '' } });
      n++;
    }
  }
  assert.ok(n >= 4, `${n} variable queries in ${files.length} dashboards`);
});

test('variable query without a range uses the default one', async () => {
  const srv = respond(golden('values-response.json'));
  const found = await ds.metricFindQuery('host', {});
  assert.equal(found.length, 3);
  const d = srv.requests[0].data;
  assert.ok(Number(d.to) > Number(d.from), `range ${d.from}..${d.to}`);
});

test('a refused variable query rejects with the backend\'s message', async () => {
  respond(golden('values-refused.json'));
  await assert.rejects(ds.metricFindQuery({ field: 'call', tool: '$nosuch' }, { range }), /not interpolated/);
});

test.after(() => record('requests', requests));
