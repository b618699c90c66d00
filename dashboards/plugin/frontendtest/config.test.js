// The config editor, rendered by React into jsdom with @grafana/ui's components: what a user
// types into the DSN, database, tenant and password fields reaches onOptionsChange where the
// backend's ParseSettings reads it (jsonData.dsn, .database, .tenant; secureJsonData.password).
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { load, loadModule, checkConsole } = require('./harness');

const React = load('react');
const { render, screen, cleanup, fireEvent } = load('@testing-library/react');
const userEvent = load('@testing-library/user-event').default;

const { plugin } = loadModule();
const ConfigEditor = plugin.components.ConfigEditor;

// Grafana's datasource settings page holds the options and gives the editor each change back.
function Page({ initial, changes }) {
  const [options, setOptions] = React.useState(initial);
  return React.createElement(ConfigEditor, {
    options,
    onOptionsChange: (o) => { changes.push(o); setOptions(o); },
  });
}

function settings(extra) {
  return Object.assign({
    id: 1, uid: 'berm', orgId: 1, name: 'berm', type: 'berm-datasource', typeName: 'berm',
    access: 'proxy', url: '', user: '', database: '', basicAuth: false, basicAuthUser: '',
    isDefault: false, jsonData: {}, secureJsonFields: {}, readOnly: false, withCredentials: false,
    typeLogoUrl: '',
  }, extra);
}

test.afterEach(() => { cleanup(); checkConsole(); });

test('config editor: DSN, database and tenant go to jsonData', async () => {
  const changes = [];
  render(React.createElement(Page, { initial: settings({ jsonData: { keep: 1 } }), changes }));
  const user = userEvent.setup({ document: window.document, delay: null });
  const dsn = screen.getByLabelText('ClickHouse DSN');
  const db = screen.getByLabelText('Database');
  const tenant = screen.getByLabelText('Tenant');
  await user.type(dsn, 'clickhouse://127.0.0.1:9000/berm');
  await user.type(db, 'audit');
  await user.type(tenant, 'acme');
  const last = changes[changes.length - 1];
  assert.deepEqual(last.jsonData, { keep: 1, dsn: 'clickhouse://127.0.0.1:9000/berm', database: 'audit', tenant: 'acme' });
  assert.equal(last.secureJsonData, undefined, 'no secret is written when none is typed');
  assert.equal(dsn.value, 'clickhouse://127.0.0.1:9000/berm');
});

test('config editor: the password goes to secureJsonData, never to jsonData', async () => {
  const changes = [];
  render(React.createElement(Page, { initial: settings({ jsonData: { dsn: 'clickhouse://h:9000/berm' } }), changes }));
  const user = userEvent.setup({ document: window.document, delay: null });
  await user.type(screen.getByLabelText('Password'), 's3cret');
  const last = changes[changes.length - 1];
  assert.deepEqual(last.secureJsonData, { password: 's3cret' });
  assert.deepEqual(last.jsonData, { dsn: 'clickhouse://h:9000/berm' });
  assert.ok(!JSON.stringify(last.jsonData).includes('s3cret'));
});

test('config editor: a stored password shows as configured and reset clears it', async () => {
  const changes = [];
  render(React.createElement(Page, { initial: settings({ secureJsonFields: { password: true } }), changes }));
  const pw = screen.getByLabelText('Password');
  assert.equal(pw.value, 'configured');
  assert.ok(pw.disabled, 'a configured secret is not editable until reset');
  fireEvent.click(screen.getByRole('button', { name: 'Reset' }));
  const last = changes[changes.length - 1];
  assert.deepEqual(last.secureJsonFields, { password: false });
  assert.deepEqual(last.secureJsonData, { password: '' });
  assert.equal(screen.getByLabelText('Password').disabled, false);
});
