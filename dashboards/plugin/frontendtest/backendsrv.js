// A BackendSrv for @grafana/runtime's setBackendSrv. It stands in for Grafana core's HTTP client
// (public/app/core/services/backend_srv.ts) and for the server behind it: it records each
// request and answers /api/ds/query with a response the Go side wrote from the plugin's own
// frames (testdata/, TestFrontendGolden), as a non-2xx answer when that response is an error,
// the way core's fetch fails with the body as the error's data.
'use strict';
const fs = require('node:fs');
const path = require('node:path');
const { load } = require('./harness');

const rxjs = load('rxjs');

function golden(name) {
  return JSON.parse(fs.readFileSync(path.join(__dirname, 'testdata', name), 'utf8'));
}

class BackendSrv {
  constructor(answer) {
    this.answer = answer; // the response body for a request
    this.requests = [];
  }

  fetch(options) {
    this.requests.push(options);
    const body = this.answer(options);
    const failed = Object.values(body.results || {}).find((r) => r.status >= 400);
    if (failed) {
      return rxjs.throwError(() => ({ status: failed.status, statusText: 'Bad Request', data: body, config: options }));
    }
    return rxjs.of({ data: body, status: 200, statusText: 'OK', ok: true, headers: new Headers(), redirected: false, type: 'basic', url: options.url, config: options });
  }

  // The datasource's requests go through fetch (DataSourceWithBackend.query); the rest of the
  // interface is not expected here.
  get() { throw new Error('unexpected BackendSrv.get'); }
  post() { throw new Error('unexpected BackendSrv.post'); }
  put() { throw new Error('unexpected BackendSrv.put'); }
  patch() { throw new Error('unexpected BackendSrv.patch'); }
  delete() { throw new Error('unexpected BackendSrv.delete'); }
  request() { throw new Error('unexpected BackendSrv.request'); }
  datasourceRequest() { throw new Error('unexpected BackendSrv.datasourceRequest'); }
}

module.exports = { BackendSrv, golden };
