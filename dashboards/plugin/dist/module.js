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

    // Variable queries: {queryType: 'values', field: 'tenant' | 'tool' | 'host' | 'call'}.
    metricFindQuery(query, options) {
      var q = typeof query === 'string' ? { field: query } : Object.assign({}, query);
      q.queryType = 'values';
      q.refId = 'V';
      q = this.applyTemplateVariables(q, (options && options.scopedVars) || {});
      q.datasource = { uid: this.uid, type: this.type };
      var range = (options && options.range) || runtime.getTemplateSrv().timeRange;
      var body = { queries: [q] };
      if (range) {
        body.from = String(range.from.valueOf());
        body.to = String(range.to.valueOf());
      }
      return runtime.getBackendSrv().post('/api/ds/query', body).then(function (resp) {
        var res = resp.results && resp.results.V;
        if (!res || !res.frames || !res.frames.length) {
          return [];
        }
        var vals = res.frames[0].data.values;
        return vals[0].map(function (text, i) {
          return { text: text, value: vals[1][i] };
        });
      });
    }
  }

  function field(label, value, onChange, tooltip, width) {
    return h(ui.InlineField, { label: label, labelWidth: 16, tooltip: tooltip },
      h(ui.Input, {
        width: width || 40, value: value || '',
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
      field('ClickHouse DSN', jd.dsn, setJSON('dsn'), 'clickhouse://host:9000/database (native protocol)', 60),
      field('Database', jd.database, setJSON('database'), 'overrides the DSN\'s database'),
      field('Tenant', jd.tenant, setJSON('tenant'), 'restrict every query of this datasource to one tenant'),
      h(ui.InlineField, { label: 'Password', labelWidth: 16 },
        h(ui.SecretInput, {
          width: 40, isConfigured: !!secureSet,
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

  function QueryEditor(props) {
    var q = props.query;
    function set(key) {
      return function (v) {
        var next = Object.assign({}, q);
        next[key] = key === 'limit' ? (parseInt(v, 10) || 0) : v;
        props.onChange(next);
      };
    }
    var typeOptions = QUERY_TYPES.map(function (t) { return { label: t, value: t }; });
    return h('div', null,
      h(ui.InlineField, { label: 'Query type', labelWidth: 16 },
        h(ui.Select, {
          width: 40, options: typeOptions, value: q.queryType,
          onChange: function (v) { set('queryType')(v.value); props.onRunQuery(); }
        })),
      field('Tenant', q.tenant, set('tenant'), 'a tenant, a list (a,b), * or a variable: ${tenant:csv}'),
      field('Tool', q.tool, set('tool'), 'a tool, a list, * or ${tool:csv}'),
      field('Host', q.host, set('host')),
      field('Surface', q.surface, set('surface'), 'isolation, resource, policy, credential, approval, observability'),
      field('End reason', q.endReason, set('endReason'), 'exit, timeout, memory_limit, ...'),
      field('Complete', q.complete, set('complete'), 'true, false or empty'),
      field('Text', q.text, set('text'), 'free text: call id, argv, a path, address or syscall of an event'),
      field('Call', q.call, set('call'), 'a call key or id (call panels)'),
      field('Group by', q.groupBy, set('groupBy'), 'alerts_over_time: rule, severity or surface; timeline: an event kind'),
      field('Values of', q.field, set('field'), 'values: tenant, tool, host or call'),
      field('Limit', q.limit ? String(q.limit) : '', set('limit'), 'rows, 1000 when empty', 12),
      h(ui.Button, { variant: 'secondary', onClick: props.onRunQuery }, 'Run'));
  }

  var plugin = new data.DataSourcePlugin(BermDataSource)
    .setConfigEditor(ConfigEditor)
    .setQueryEditor(QueryEditor);
  return { plugin: plugin };
});
