// A TemplateSrv for @grafana/runtime's setTemplateSrv. It stands in for Grafana core's
// (public/app/features/templating/template_srv.ts, not published to npm), following its
// replace() for what the datasource meets: $var, ${var}, ${var:format} and [[var]]; scoped
// variables first; "All" as the variable's custom allValue, unformatted, or else every option's
// value; $__from and $__to from the time range; an unknown variable left as written. Formats
// (@grafana/scenes' registry in Grafana): csv, glob (the default), pipe, raw, text.
'use strict';

const variableRegex = /\$(\w+)|\[\[(\w+?)(?::(\w+))?\]\]|\${(\w+)(?:\.([^:^\}]+))?(?::([^\}]+))?}/g;
const ALL = '$__all';

function format(value, fmt) {
  switch (fmt || 'glob') {
    case 'csv':
    case 'raw':
      return Array.isArray(value) ? value.join(',') : String(value);
    case 'pipe':
      return Array.isArray(value) ? value.join('|') : String(value);
    case 'glob':
      if (Array.isArray(value)) {
        return value.length > 1 ? '{' + value.join(',') + '}' : String(value[0] ?? '');
      }
      return String(value);
    default:
      throw new Error(`format ${fmt} is not one this stand-in knows`);
  }
}

class TemplateSrv {
  // variables: [{name, current: {value, text}, options: [{value}], allValue}]
  constructor(variables) {
    this.variables = variables || [];
    this.range = null;
  }

  getVariables() {
    return this.variables;
  }

  updateTimeRange(range) {
    this.range = range;
  }

  containsTemplate(target) {
    if (!target) {
      return false;
    }
    variableRegex.lastIndex = 0;
    return variableRegex.test(target);
  }

  replace(target, scopedVars, fmt) {
    if (!target) {
      return target ?? '';
    }
    variableRegex.lastIndex = 0;
    return target.replace(variableRegex, (match, v1, v2, f2, v3, fieldPath, f3) => {
      const name = v1 || v2 || v3;
      const f = f2 || f3 || fmt;
      const scoped = scopedVars && scopedVars[name];
      if (scoped && scoped.value !== undefined && scoped.value !== null) {
        return format(scoped.value, f);
      }
      if ((name === '__from' || name === '__to') && this.range) {
        return String(this.range[name === '__from' ? 'from' : 'to'].valueOf());
      }
      const variable = this.variables.find((v) => v.name === name);
      if (!variable) {
        return match;
      }
      let value = variable.current.value;
      if (value === ALL || (Array.isArray(value) && value[0] === ALL)) {
        if (variable.allValue) {
          return this.replace(variable.allValue);
        }
        value = variable.options.filter((o) => o.value !== ALL).map((o) => o.value);
      }
      return format(value, f);
    });
  }
}

module.exports = { TemplateSrv };
