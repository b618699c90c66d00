/*
 * berm-datasource frontend, hand-written so that installing the plugin needs no npm: an AMD
 * module whose dependencies are the modules Grafana provides to every plugin at run time.
 * The backend (gpx_berm-datasource) does the querying; this file gives Grafana's UI a config
 * editor, a query editor, template-variable interpolation and variable queries.
 */
define(['react', '@grafana/data', '@grafana/runtime', '@grafana/ui'], function (React, data, runtime, ui) {
  'use strict';
  var h = React.createElement;

  // The query types the backend serves (collector/query; a Go test checks this list).
  var QUERY_TYPES = [
    'alerts', 'alerts_over_time', 'approval_refusals', 'approvals', 'backlog', 'call_denials',
    'call_files', 'call_network', 'call_summary', 'calls', 'completeness', 'dns', 'dns_alerts',
    'dns_over_time', 'dns_refusals', 'drops', 'egress_denials', 'escape_syscalls',
    'first_seen', 'ingest_lag', 'matrix', 'process_tree', 'stats', 'timeline', 'top_rules',
    'top_tools', 'values', 'violations_over_time'
  ];
  // The query's text fields, interpolated before the query leaves the browser.
  var FIELDS = ['tenant', 'tool', 'host', 'surface', 'endReason', 'complete', 'text', 'call', 'groupBy', 'field'];
  // The fields each query type reads (a Go test derives them from the backend's SQL and checks
  // the editor shows exactly these); a type missing here shows every field.
  var TYPE_FIELDS = {
    alerts: ['tenant', 'tool', 'surface', 'text', 'call', 'limit'],
    alerts_over_time: ['tenant', 'tool', 'surface', 'groupBy'],
    approval_refusals: ['tenant', 'tool', 'call'],
    approvals: ['tenant', 'tool', 'call', 'limit'],
    backlog: ['tenant', 'tool', 'host'],
    call_denials: ['tenant', 'call', 'limit'],
    call_files: ['tenant', 'call', 'limit'],
    call_network: ['tenant', 'call', 'limit'],
    call_summary: ['tenant', 'call'],
    calls: ['tenant', 'tool', 'host', 'surface', 'endReason', 'complete', 'text', 'limit'],
    completeness: ['tenant', 'tool', 'host', 'surface', 'endReason', 'complete', 'text'],
    dns: ['tenant', 'tool', 'text', 'call', 'limit'],
    dns_alerts: ['tenant', 'tool', 'limit'],
    dns_over_time: ['tenant', 'tool', 'call'],
    dns_refusals: ['tenant', 'tool', 'call', 'limit'],
    drops: ['tenant', 'tool', 'host', 'surface', 'endReason', 'complete', 'text'],
    egress_denials: ['tenant', 'tool', 'limit'],
    escape_syscalls: ['tenant', 'tool', 'limit'],
    first_seen: ['tenant', 'tool', 'limit'],
    ingest_lag: ['tenant', 'tool', 'host'],
    matrix: ['tenant', 'tool', 'host', 'surface', 'endReason', 'complete', 'text'],
    process_tree: ['tenant', 'call', 'limit'],
    stats: ['tenant', 'tool', 'host', 'surface', 'endReason', 'complete', 'text'],
    timeline: ['tenant', 'call', 'groupBy', 'limit'],
    top_rules: ['tenant', 'tool', 'surface', 'limit'],
    top_tools: ['tenant', 'tool', 'surface', 'limit'],
    values: ['tenant', 'tool', 'host', 'field', 'limit'],
    violations_over_time: ['tenant', 'tool', 'surface']
  };

  // Grafana cancels a request still running when another with its requestId starts: every
  // variable query gets its own, or the dashboard's variables, refreshed together, cancel each
  // other and all but one stay empty.
  var valuesRequests = 0;

  class BermDataSource extends runtime.DataSourceWithBackend {
    constructor(settings) {
      super(settings);
    }

    // Multi-value variables become comma-separated lists; "All" arrives as the variable's
    // allValue ("*"), which the backend reads as no filter.
    applyTemplateVariables(query, scopedVars) {
      var srv = runtime.getTemplateSrv();
      var out = Object.assign({}, query);
      FIELDS.forEach(function (f) {
        if (typeof out[f] === 'string' && out[f] !== '') {
          out[f] = srv.replace(out[f], scopedVars || {}, 'csv');
        }
      });
      return out;
    }

    filterQuery(query) {
      return !!query.queryType;
    }

    // Variable queries: {queryType: 'values', field: 'tenant' | 'tool' | 'host' | 'call'}, or
    // the field alone as text (Grafana's editor for datasources without one of their own). They
    // go through query(), the panels' path: the same interpolation, request and frame decoding.
    metricFindQuery(query, options) {
      var q = typeof query === 'string' ? { field: query.trim() } : Object.assign({}, query);
      q.queryType = 'values';
      q.refId = 'berm-values';
      var request = {
        targets: [q],
        range: (options && options.range) || data.getDefaultTimeRange(),
        scopedVars: (options && options.scopedVars) || {},
        requestId: 'berm-values-' + (++valuesRequests),
        intervalMs: 60000,
        maxDataPoints: 1000
      };
      var self = this;
      return new Promise(function (resolve, reject) {
        var last;
        self.query(request).subscribe({
          next: function (r) { last = r; },
          error: reject,
          complete: function () {
            if (!last) {
              return reject(new Error('berm: the values query gave no response'));
            }
            if (last.error) {
              return reject(new Error(last.error.message || 'berm: the values query failed'));
            }
            var frame = last.data && last.data[0];
            if (!frame || !frame.fields || frame.fields.length < 2) {
              return resolve([]);
            }
            var texts = toArray(frame.fields[0].values);
            var values = toArray(frame.fields[1].values);
            resolve(texts.map(function (text, i) {
              return { text: String(text), value: String(values[i]) };
            }));
          }
        });
      });
    }
  }

  // A field's values: an array from Grafana 10, a Vector before it.
  function toArray(v) {
    return Array.isArray(v) ? v : v.toArray();
  }

  // field is a labelled text input; id ties the label to it (clicking the label focuses it,
  // screen readers name it), so ids are unique per page: query editors prefix their refId.
  // labelWidth 20 (160 px): "ClickHouse DSN" with its tooltip icon spills out of 16.
  function field(id, label, value, onChange, tooltip, width) {
    return h(ui.InlineField, { key: id, label: label, labelWidth: 20, tooltip: tooltip, htmlFor: id },
      h(ui.Input, {
        id: id, width: width || 40, value: value || '',
        onChange: function (e) { onChange(e.currentTarget.value); }
      }));
  }

  function ConfigEditor(props) {
    var options = props.options;
    var jd = options.jsonData || {};
    function setJSON(key) {
      return function (v) {
        var next = Object.assign({}, jd);
        next[key] = v;
        props.onOptionsChange(Object.assign({}, options, { jsonData: next }));
      };
    }
    var secureSet = options.secureJsonFields && options.secureJsonFields.password;
    return h('div', { className: 'gf-form-group' },
      field('berm-config-dsn', 'ClickHouse DSN', jd.dsn, setJSON('dsn'), 'clickhouse://host:9000/database (native protocol)', 60),
      field('berm-config-database', 'Database', jd.database, setJSON('database'), 'overrides the DSN\'s database'),
      field('berm-config-tenant', 'Tenant', jd.tenant, setJSON('tenant'), 'restrict every query of this datasource to one tenant'),
      h(ui.InlineField, { label: 'Password', labelWidth: 20, htmlFor: 'berm-config-password' },
        h(ui.SecretInput, {
          id: 'berm-config-password', width: 40, isConfigured: !!secureSet,
          value: (options.secureJsonData && options.secureJsonData.password) || '',
          onReset: function () {
            props.onOptionsChange(Object.assign({}, options, {
              secureJsonFields: Object.assign({}, options.secureJsonFields, { password: false }),
              secureJsonData: Object.assign({}, options.secureJsonData, { password: '' })
            }));
          },
          onChange: function (e) {
            props.onOptionsChange(Object.assign({}, options, {
              secureJsonData: Object.assign({}, options.secureJsonData, { password: e.currentTarget.value })
            }));
          }
        })));
  }

  // The query editor's text fields: the model's JSON name, label and tooltip.
  var EDITOR_FIELDS = [
    ['tenant', 'Tenant', 'a tenant, a list (a,b), * or a variable: ${tenant:csv}'],
    ['tool', 'Tool', 'a tool, a list, * or ${tool:csv}'],
    ['host', 'Host', 'a host, a list, * or ${host:csv}'],
    ['surface', 'Surface', 'isolation, resource, policy, credential, approval, observability'],
    ['endReason', 'End reason', 'exit, timeout, memory_limit, ...'],
    ['complete', 'Complete', 'true, false or empty'],
    ['text', 'Text', 'free text: call id, argv, a path, address or syscall of an event'],
    ['call', 'Call', 'a call key or id'],
    ['groupBy', 'Group by', 'alerts_over_time: rule, severity or surface; timeline: an event kind'],
    ['field', 'Values of', 'tenant, tool, host or call'],
    ['limit', 'Limit', 'rows, 1000 when empty']
  ];

  function QueryEditor(props) {
    var q = props.query;
    var prefix = 'berm-' + (q.refId || 'A') + '-';
    function set(key) {
      return function (v) {
        var next = Object.assign({}, q);
        next[key] = key === 'limit' ? (parseInt(v, 10) || 0) : v;
        props.onChange(next);
      };
    }
    var typeOptions = QUERY_TYPES.map(function (t) { return { label: t, value: t }; });
    var shown = q.queryType ? (TYPE_FIELDS[q.queryType] || EDITOR_FIELDS.map(function (f) { return f[0]; })) : [];
    var inputs = EDITOR_FIELDS.filter(function (f) { return shown.indexOf(f[0]) >= 0; }).map(function (f) {
      if (f[0] === 'limit') {
        return field(prefix + 'limit', f[1], q.limit ? String(q.limit) : '', set('limit'), f[2], 12);
      }
      return field(prefix + f[0], f[1], q[f[0]], set(f[0]), f[2]);
    });
    return h('div', null,
      h(ui.InlineField, { label: 'Query type', labelWidth: 20, htmlFor: prefix + 'type' },
        h(ui.Select, {
          inputId: prefix + 'type', width: 40, options: typeOptions, value: q.queryType || null,
          onChange: function (v) { set('queryType')(v.value); props.onRunQuery(); }
        })),
      inputs,
      h(ui.Button, { variant: 'secondary', onClick: function () { props.onRunQuery(); } }, 'Run'));
  }

  var plugin = new data.DataSourcePlugin(BermDataSource)
    .setConfigEditor(ConfigEditor)
    .setQueryEditor(QueryEditor);
  return { plugin: plugin };
});
