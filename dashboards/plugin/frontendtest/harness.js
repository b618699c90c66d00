// The browser module.js runs in, as far as node can give one: jsdom's window as the global
// scope, the real npm builds of the packages Grafana hands a plugin at run time, and an AMD
// define that passes them to dist/module.js the way Grafana's SystemJS loader does. Nothing of
// berm's is replaced: the test harness only provides what Grafana's page would.
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const vm = require('node:vm');
const { createRequire } = require('node:module');

// The installed packages: $BERM_FRONTEND_MODULES (the Go test's cache of `npm ci`), else this
// directory's own node_modules.
const base = process.env.BERM_FRONTEND_MODULES || __dirname;
const load = createRequire(path.join(base, 'package.json'));

const { JSDOM } = load('jsdom');
const dom = new JSDOM('<!doctype html><html><head></head><body></body></html>', {
  url: 'http://localhost:3000/', pretendToBeVisual: true,
});
const win = dom.window;
// What jsdom lacks and Grafana's own jest set-up (public/test/jest-setup.ts) supplies: no
// media query matches; the boot data @grafana/runtime's config reads at load.
win.matchMedia = (query) => ({
  matches: false, media: query, onchange: null,
  addListener() {}, removeListener() {}, addEventListener() {}, removeEventListener() {},
  dispatchEvent() { return false; },
});
win.grafanaBootData = { settings: {}, user: {}, navTree: [] };
// jsdom's window becomes the global scope; node's own event classes give way to the DOM's,
// which jsdom's dispatchEvent insists on.
for (const k of Object.getOwnPropertyNames(win)) {
  if (k === 'undefined' || (k in globalThis && !/Event(Target)?$/.test(k))) {
    continue;
  }
  Object.defineProperty(globalThis, k, { configurable: true, get: () => win[k] });
}
globalThis.IS_REACT_ACT_ENVIRONMENT = true; // act() around renders, as in Grafana's tests

const deps = {
  react: load('react'),
  '@grafana/data': load('@grafana/data'),
  '@grafana/runtime': load('@grafana/runtime'),
  '@grafana/ui': load('@grafana/ui'),
};

// React and Grafana's components report misuse (a missing key, an unknown prop, an update
// outside act) on console.error and go on: each test fails on any (checkConsole).
const consoleErrors = [];
const consoleError = console.error;
console.error = (...args) => {
  consoleErrors.push(require('node:util').format(...args));
  consoleError(...args);
};
function checkConsole() {
  const errs = consoleErrors.splice(0);
  if (errs.length) {
    throw new Error('console.error during the test:\n' + errs.join('\n'));
  }
}

// loadModule runs dist/module.js as Grafana would: a script whose define names its
// dependencies; it gives the module's exports.
function loadModule(file) {
  file = file || path.join(__dirname, '..', 'dist', 'module.js');
  let exported;
  let calls = 0;
  const define = (names, factory) => {
    calls++;
    const missing = names.filter((n) => !(n in deps));
    if (missing.length) {
      throw new Error(`module.js asks for ${missing.join(', ')}, which this harness does not provide (Grafana 10.1's plugin_loader.ts exposes more)`);
    }
    exported = factory(...names.map((n) => deps[n]));
  };
  define.amd = {};
  globalThis.define = define;
  try {
    vm.runInThisContext(fs.readFileSync(file, 'utf8'), { filename: file });
  } finally {
    delete globalThis.define;
  }
  if (calls !== 1) {
    throw new Error(`module.js called define ${calls} times, want 1`);
  }
  return exported;
}

// record appends what a test produced for the Go side to check (the backend parses every
// query the editor wrote): $BERM_FRONTEND_OUT/<name>.json.
function record(name, value) {
  const dir = process.env.BERM_FRONTEND_OUT;
  if (!dir) {
    return;
  }
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, name + '.json'), JSON.stringify(value, null, 1));
}

module.exports = { load, deps, loadModule, record, checkConsole };
