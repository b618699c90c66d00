// The query editor, rendered into jsdom with @grafana/ui's Select and Input: it offers every
// query type the backend serves, shows the fields each type reads, and what a user types there
// becomes the query JSON the backend parses. The Go test (TestFrontend) passes the backend's
// query types and the fields each reads (BERM_QUERY_TYPES, BERM_TYPE_FIELDS) and parses every
// query recorded here (BERM_FRONTEND_OUT) with the backend's ParseModel and Params.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const { load, loadModule, record, checkConsole } = require('./harness');

const React = load('react');
const { render, screen, cleanup, within } = load('@testing-library/react');
const userEvent = load('@testing-library/user-event').default;

const { plugin } = loadModule();
const QueryEditor = plugin.components.QueryEditor;

const backendTypes = process.env.BERM_QUERY_TYPES && JSON.parse(process.env.BERM_QUERY_TYPES);
const typeFields = process.env.BERM_TYPE_FIELDS && JSON.parse(process.env.BERM_TYPE_FIELDS);
const fromGo = 'needs the backend\'s query types: run through go test ./dashboards/plugin -run TestFrontend';

// What a user types into each field, and the value the query JSON should then hold.
function typed(queryType) {
  return {
    tenant: 'acme', tool: 'git,curl', host: 'node-1', surface: 'credential', endReason: 'timeout',
    complete: 'true', text: '/etc/shadow', call: 'c-42',
    groupBy: queryType === 'alerts_over_time' ? 'severity' : 'exec',
    field: 'tool', limit: '50',
  };
}

// Grafana's query row holds the query and gives the editor each change back.
function Row({ initial, changes, runs }) {
  const [query, setQuery] = React.useState(initial);
  return React.createElement('div', { 'data-testid': 'row-' + initial.refId },
    React.createElement(QueryEditor, {
      query, datasource: {}, onChange: (q) => { changes.push(q); setQuery(q); }, onRunQuery: () => runs.push(1),
    }));
}

function shownFields(row, refId) {
  const prefix = 'berm-' + refId + '-';
  return Array.from(row.querySelectorAll('input'))
    .map((i) => i.id)
    .filter((id) => id.startsWith(prefix) && id !== prefix + 'type')
    .map((id) => id.slice(prefix.length));
}

async function openTypes(user) {
  await user.click(screen.getByLabelText('Query type'));
  return screen.getAllByLabelText('Select option');
}

test.afterEach(() => { cleanup(); checkConsole(); });

test('query editor: a new query shows only the query type', () => {
  render(React.createElement(Row, { initial: { refId: 'A' }, changes: [], runs: [] }));
  const inputs = screen.getByTestId('row-A').querySelectorAll('input');
  assert.equal(inputs.length, 1, 'the type select\'s input alone');
  assert.equal(inputs[0], screen.getByLabelText('Query type'));
});

test('query editor: every query type the backend serves is offered', async (t) => {
  if (!backendTypes) {
    return t.skip(fromGo);
  }
  render(React.createElement(Row, { initial: { refId: 'A' }, changes: [], runs: [] }));
  const user = userEvent.setup({ document: window.document, delay: null });
  const offered = (await openTypes(user)).map((o) => o.textContent);
  assert.deepEqual(offered, backendTypes);
});

test('query editor: each type shows the fields it reads and writes what is typed', async (t) => {
  if (!backendTypes || !typeFields) {
    return t.skip(fromGo);
  }
  const out = [];
  for (const qt of backendTypes) {
    const changes = [];
    const runs = [];
    const refId = 'Q' + out.length;
    render(React.createElement(Row, { initial: { refId }, changes, runs }));
    const row = screen.getByTestId('row-' + refId);
    const user = userEvent.setup({ document: window.document, delay: null });
    await user.click(within(row).getByLabelText('Query type'));
    const option = screen.getAllByLabelText('Select option').find((o) => o.textContent === qt);
    assert.ok(option, `${qt} is offered`);
    await user.click(option);
    assert.equal(changes[changes.length - 1].queryType, qt);
    assert.equal(runs.length, 1, 'choosing a type runs the query');

    const shown = shownFields(row, refId);
    assert.deepEqual(shown, typeFields[qt], `${qt}: fields shown`);
    const values = typed(qt);
    const want = { refId, queryType: qt };
    for (const f of shown) {
      await user.type(row.querySelector('#berm-' + refId + '-' + f), values[f]);
      want[f] = f === 'limit' ? Number(values[f]) : values[f];
    }
    const q = changes[changes.length - 1];
    assert.deepEqual(q, want, `${qt}: the query JSON`);
    out.push({ typed: Object.fromEntries(shown.map((f) => [f, values[f]])), query: q });
    cleanup();
  }
  record('editor-queries', out);
});

test('query editor: a saved query shows its values; two editors on a page keep their own ids', () => {
  const a = { refId: 'A', queryType: 'calls', tool: 'git', limit: 20 };
  const b = { refId: 'B', queryType: 'timeline', call: 'c-1' };
  render(React.createElement('div', null,
    React.createElement(Row, { initial: a, changes: [], runs: [] }),
    React.createElement(Row, { initial: b, changes: [], runs: [] })));
  assert.equal(document.getElementById('berm-A-tool').value, 'git');
  assert.equal(document.getElementById('berm-A-limit').value, '20');
  assert.equal(document.getElementById('berm-B-call').value, 'c-1');
  assert.equal(document.querySelectorAll('[id="berm-A-tenant"]').length, 1);
  assert.equal(within(screen.getByTestId('row-A')).getByText('calls').textContent, 'calls', 'the chosen type is shown');
});

test('query editor: markup in a saved query is shown as text, not parsed', () => {
  const evil = '"><img src=x onerror="globalThis.pwned=1">';
  render(React.createElement(Row, { initial: { refId: 'A', queryType: 'calls', tool: evil, text: '</div><script>globalThis.pwned=1</script>' }, changes: [], runs: [] }));
  const row = screen.getByTestId('row-A');
  assert.equal(row.querySelector('img'), null);
  assert.equal(row.querySelector('script'), null);
  assert.equal(document.getElementById('berm-A-tool').value, evil);
  assert.equal(globalThis.pwned, undefined);
});
