// A small proxy-wasm (ABI 0.2.1) host on Node's V8, for the project's V8 tier.
//
// Envoy runs Wasm filters on V8 with TurboFan only (--no-liftoff) and compiles each function
// on its first call, so what the module runs during _initialize, configure and the first
// requests is start-up latency, and per-request guest time is TurboFan code. The project's
// wazero host (wasmhost/) reproduces Envoy's behaviour in detail; this host reproduces only
// what the smoke test and the benchmarks need, on the engine Envoy uses: worker VMs that are
// separate instances of one compiled module, one shared-data store with Envoy's CAS rules
// (shared by the workers, as in one Envoy process), the header maps, properties, metrics and
// local responses of an HTTP stream. Node's V8 is older than Envoy's.
//
// Run by wasmhost/v8's Go tests as `node --no-liftoff host.js < job.json`: the job names the
// module, the configuration and what to do; the result is one JSON object on stdout.
'use strict';

const fs = require('fs');
const crypto = require('crypto');

// proxy-wasm status codes (ABI 0.2.1).
const OK = 0, NOT_FOUND = 1, BAD_ARGUMENT = 2, CAS_MISMATCH = 8, UNIMPLEMENTED = 12;
// WASI errno values.
const ESUCCESS = 0, EBADF = 8, ENOSYS = 52, ENOTSUP = 58;

// SharedData is Envoy's shared data: keys per vm_id, no deletion, one CAS counter that starts
// at 1 and skips 0; CAS 0 writes unconditionally, an absent key is written whatever CAS is.
class SharedData {
  constructor() { this.map = new Map(); this.nextCas = 0; }
  get(key) { return this.map.get(key); }
  set(key, value, cas) {
    const e = this.map.get(key);
    if (e && cas !== 0 && cas !== e.cas) return CAS_MISMATCH;
    this.nextCas = (this.nextCas + 1) >>> 0;
    if (this.nextCas === 0) this.nextCas = 1;
    this.map.set(key, { value, cas: this.nextCas });
    return OK;
  }
}

const textEnc = new TextEncoder();
const textDec = new TextDecoder();

// Node's TextEncoder and TextDecoder cross into C++ on every call, about 1 us each for the
// short strings of a request (header names, shared-data keys, property paths), which would
// count as guest time and hide the filter's own cost; Envoy's host functions are C++ and pay
// nothing like it. Short ASCII strings are therefore converted in JavaScript.
const dec = {
  decode(b) {
    if (b.length > 256) return textDec.decode(b);
    let s = '';
    for (let i = 0; i < b.length; i++) {
      const c = b[i];
      if (c >= 0x80) return textDec.decode(b);
      s += String.fromCharCode(c);
    }
    return s;
  },
};
const enc = {
  encode(s) {
    if (s.length > 256) return textEnc.encode(s);
    const b = new Uint8Array(s.length);
    for (let i = 0; i < s.length; i++) {
      const c = s.charCodeAt(i);
      if (c >= 0x80) return textEnc.encode(s);
      b[i] = c;
    }
    return b;
  },
};

// VM is one instance of the module: one worker (or the canary) in Envoy's terms.
class VM {
  constructor(module, opts) {
    this.opts = opts; // {vmId, pluginConfig, shared, metrics, logs}
    this.nextId = 1;
    this.stream = null;
    this.guestNs = 0n;
    this.phases = {};
    const self = this;
    const env = {
      proxy_log: (level, p, n) => { opts.logs.push([level, self.str(p, n)]); return OK; },
      proxy_get_log_level: (p) => { self.view().setUint32(p, opts.logLevel ?? 2, true); return OK; },
      proxy_get_buffer_bytes: (type, start, len, pp, sp) => {
        if (type !== 7 && type !== 6) return NOT_FOUND;
        const b = type === 7 ? opts.pluginConfig : new Uint8Array(0);
        return self.give(b.subarray(start, start + len), pp, sp);
      },
      proxy_get_header_map_pairs: (type, pp, sp) => {
        const s = self.stream;
        if (type === 0 && s && s.reqPairs) return self.give(s.reqPairs, pp, sp);
        return self.give(self.pairs(self.headers(type)), pp, sp);
      },
      proxy_get_header_map_value: (type, kp, kn, pp, sp) => {
        const h = self.headers(type);
        if (!h) return NOT_FOUND;
        const k = self.str(kp, kn).toLowerCase();
        const e = h.find((x) => x[0] === k);
        if (!e) return NOT_FOUND;
        return self.give(enc.encode(e[1]), pp, sp);
      },
      proxy_add_header_map_value: (type, kp, kn, vp, vn) => {
        const h = self.headers(type);
        if (!h) return NOT_FOUND;
        h.push([self.str(kp, kn).toLowerCase(), self.str(vp, vn)]);
        return OK;
      },
      proxy_remove_header_map_value: (type, kp, kn) => {
        const h = self.headers(type);
        if (!h) return NOT_FOUND;
        const k = self.str(kp, kn).toLowerCase();
        // Envoy removes every line of the header; removing an absent one is not an error.
        for (let i = h.length - 1; i >= 0; i--) if (h[i][0] === k) h.splice(i, 1);
        return OK;
      },
      proxy_get_property: (pp, pn, vp, vs) => {
        const v = self.property(self.str(pp, pn));
        return v === undefined ? NOT_FOUND : self.give(v, vp, vs);
      },
      proxy_set_property: (pp, pn, vp, vn) => {
        // Envoy keeps a stream's properties in its filter state; the root context has none.
        const s = self.stream;
        if (!s) return NOT_FOUND;
        (s.props = s.props || new Map()).set(self.str(pp, pn), self.str(vp, vn));
        return OK;
      },
      proxy_get_shared_data: (kp, kn, vp, vs, cp) => {
        const e = opts.shared.get(opts.vmId + '\0' + self.str(kp, kn));
        if (!e) return NOT_FOUND;
        const st = self.give(e.value, vp, vs);
        if (st === OK) self.view().setUint32(cp, e.cas, true);
        return st;
      },
      proxy_set_shared_data: (kp, kn, vp, vn, cas) =>
        opts.shared.set(opts.vmId + '\0' + self.str(kp, kn), self.bytes(vp, vn), cas >>> 0),
      proxy_http_call: () => UNIMPLEMENTED, // the V8 tier runs local limits only
      proxy_send_local_response: (status, dp, dn, bp, bn, hp, hn) => {
        const s = self.stream;
        if (!s) return NOT_FOUND;
        s.local = { status, body: self.str(bp, bn), headers: self.unpairs(self.bytes(hp, hn)) };
        return OK;
      },
      proxy_continue_stream: () => OK,
      proxy_set_effective_context: () => OK,
      proxy_set_tick_period_milliseconds: () => OK,
      proxy_define_metric: (type, np, nn, ip) => {
        const name = self.str(np, nn);
        if (!opts.metrics.has(name)) opts.metrics.set(name, { id: opts.metrics.size + 1, value: 0n });
        self.view().setUint32(ip, opts.metrics.get(name).id, true);
        return OK;
      },
      proxy_increment_metric: (id, d) => { self.metric(id, (m) => { m.value += d; }); return OK; },
      proxy_record_metric: (id, v) => { self.metric(id, (m) => { m.value = v; }); return OK; },
    };
    const wasi = {
      fd_write: (fd, iovs, n, np) => {
        const v = self.view();
        let total = 0;
        for (let i = 0; i < n; i++) {
          const p = v.getUint32(iovs + 8 * i, true), l = v.getUint32(iovs + 8 * i + 4, true);
          opts.logs.push([fd, self.str(p, l)]);
          total += l;
        }
        v.setUint32(np, total, true);
        return ESUCCESS;
      },
      fd_read: () => EBADF,
      fd_close: () => EBADF,
      fd_fdstat_get: (fd, p) => {
        if (fd !== 1 && fd !== 2) return EBADF;
        new Uint8Array(self.mem().buffer, p, 24).fill(0);
        self.view().setBigUint64(p + 8, 64n, true); // fs_rights_base = FD_WRITE
        return ESUCCESS;
      },
      fd_fdstat_set_flags: () => ENOSYS,
      fd_prestat_get: () => EBADF,
      fd_prestat_dir_name: () => ENOSYS,
      environ_sizes_get: (a, b) => { self.view().setUint32(a, 0, true); self.view().setUint32(b, 0, true); return ESUCCESS; },
      environ_get: () => ESUCCESS,
      args_sizes_get: (a, b) => { self.view().setUint32(a, 0, true); self.view().setUint32(b, 0, true); return ESUCCESS; },
      args_get: () => ESUCCESS,
      // Nanoseconds as a double (BigInt arithmetic costs about 1 us a call): exact to 256 ns
      // for the wall clock, to the nanosecond for the monotonic one.
      clock_time_get: (id, _prec, p) => {
        let t;
        if (id === 0) t = (performance.timeOrigin + performance.now()) * 1e6;
        else if (id === 1) t = performance.now() * 1e6 + 3.6e12;
        else return ENOTSUP;
        const hi = Math.floor(t / 4294967296);
        const v = self.view();
        v.setUint32(p, t - hi * 4294967296, true);
        v.setUint32(p + 4, hi, true);
        return ESUCCESS;
      },
      random_get: (p, n) => { crypto.randomFillSync(new Uint8Array(self.mem().buffer, p, n)); return ESUCCESS; },
      // Envoy >= 1.39: no events, so the Go scheduler spins instead of failing.
      poll_oneoff: (_in, _out, _n, np) => { self.view().setUint32(np, 0, true); return ESUCCESS; },
      sched_yield: () => ESUCCESS,
      proc_exit: () => {},
    };
    this.instance = new WebAssembly.Instance(module, { env, wasi_snapshot_preview1: wasi, wasi_unstable: wasi });
    this.x = this.instance.exports;
  }

  mem() { return this.x.memory; }
  // view returns a DataView of the memory, made again only when the memory grew (growing
  // replaces the ArrayBuffer).
  view() {
    const buf = this.x.memory.buffer;
    if (this.dv === undefined || this.dv.buffer !== buf) this.dv = new DataView(buf);
    return this.dv;
  }
  bytes(p, n) { return new Uint8Array(this.x.memory.buffer, p, n).slice(); }
  str(p, n) { return dec.decode(new Uint8Array(this.x.memory.buffer, p, n)); }

  // give copies b into guest memory obtained from the guest's allocator, as Envoy does, and
  // writes its address and size where the guest asked.
  give(b, pp, sp) {
    if (b === undefined || b === null) return NOT_FOUND;
    const p = b.length === 0 ? 0 : this.x.proxy_on_memory_allocate(b.length);
    if (b.length !== 0 && p === 0) return BAD_ARGUMENT;
    if (b.length) new Uint8Array(this.x.memory.buffer, p, b.length).set(b);
    const v = this.view();
    v.setUint32(pp, p, true);
    v.setUint32(sp, b.length, true);
    return OK;
  }

  metric(id, f) { for (const m of this.opts.metrics.values()) if (m.id === id) f(m); }

  headers(type) {
    const s = this.stream;
    if (!s) return undefined;
    if (type === 0) return s.reqHeaders;
    if (type === 2) return s.respHeaders;
    return undefined;
  }

  // pairs serialises a header map as proxy-wasm does: the count, each key and value length,
  // then every key and value followed by NUL.
  pairs(h) {
    if (!h) return undefined;
    const parts = h.map(([k, v]) => [enc.encode(k), enc.encode(v)]);
    let size = 4 + 8 * parts.length;
    for (const [k, v] of parts) size += k.length + v.length + 2;
    const out = new Uint8Array(size);
    const dv = new DataView(out.buffer);
    dv.setUint32(0, parts.length, true);
    let o = 4 + 8 * parts.length;
    parts.forEach(([k, v], i) => {
      dv.setUint32(4 + 8 * i, k.length, true);
      dv.setUint32(8 + 8 * i, v.length, true);
      out.set(k, o); o += k.length + 1;
      out.set(v, o); o += v.length + 1;
    });
    return out;
  }

  unpairs(b) {
    if (b.length < 4) return [];
    const dv = new DataView(b.buffer, b.byteOffset, b.length);
    const n = dv.getUint32(0, true);
    const out = [];
    let o = 4 + 8 * n;
    for (let i = 0; i < n; i++) {
      const kl = dv.getUint32(4 + 8 * i, true), vl = dv.getUint32(8 + 8 * i, true);
      const k = dec.decode(b.subarray(o, o + kl)); o += kl + 1;
      const v = dec.decode(b.subarray(o, o + vl)); o += vl + 1;
      out.push([k, v]);
    }
    return out;
  }

  // property answers the attributes the filter reads, with the values Envoy gives them.
  property(path) {
    switch (path) {
      case 'plugin_name': return enc.encode(this.opts.vmId);
      case 'plugin_root_id': return enc.encode('');
      case 'plugin_vm_id': return enc.encode(this.opts.vmId);
    }
    const s = this.stream;
    if (!s) return undefined;
    const r = s.req;
    const header = (name) => { const e = s.reqHeaders.find((x) => x[0] === name); return e && enc.encode(e[1]); };
    switch (path) {
      case 'xds\0route_name': return enc.encode(r.route || '');
      case 'xds\0virtual_host_name': return enc.encode(r.vhost || '');
      case 'source\0address': return enc.encode(r.source || '127.0.0.1:50000');
      case 'request\0protocol': return enc.encode('HTTP/1.1');
      case 'request\0path': return header(':path');
      case 'request\0method': return header(':method');
      case 'request\0host': return header(':authority');
      case 'request\0url_path': { const p = r.path || '/'; const i = p.indexOf('?'); return enc.encode(i >= 0 ? p.slice(0, i) : p); }
    }
    return undefined;
  }

  // call runs one export and adds its duration to the VM's guest time.
  call(name, ...args) {
    const t0 = process.hrtime.bigint();
    try {
      return this.x[name](...args);
    } finally {
      this.guestNs += process.hrtime.bigint() - t0;
    }
  }

  // start runs what Envoy runs when it creates a VM for a plugin: _initialize, the root
  // context, proxy_on_vm_start and proxy_on_configure. It returns false when the guest refused.
  // The time each step took is kept in this.phases (milliseconds), for the start-up benchmark.
  start() {
    let t = process.hrtime.bigint();
    const lap = (name) => {
      const now = process.hrtime.bigint();
      this.phases[name] = ms(now - t);
      t = now;
    };
    mark('init');
    this.call('_initialize');
    lap('initialize');
    mark('vmstart');
    this.root = this.nextId++;
    this.call('proxy_on_context_create', this.root, 0);
    const started = this.call('proxy_on_vm_start', this.root, 0);
    lap('vm_start');
    if (!started) return false;
    mark('configure');
    const configured = !!this.call('proxy_on_configure', this.root, this.opts.pluginConfig.length);
    lap('configure');
    return configured;
  }

  // request runs one HTTP stream through the filter: request headers, then (when the filter
  // continued) an upstream 200 and its response headers, then the log and the context's end.
  request(r) {
    const id = this.nextId++;
    const reqHeaders = [[':method', r.method || 'GET'], [':path', r.path || '/'],
      [':authority', r.authority || 'example.test'], [':scheme', 'http'], ...(r.headers || [])];
    // The request's serialised header map is made outside the guest's time, as Envoy's header
    // map is C++ data the guest's call only copies; it is kept on the request object, which
    // the benchmark loop sends again and again (a request is never changed once sent).
    if (r.pairs === undefined || r.pairsOf !== reqHeaders.length) {
      r.pairs = this.pairs(reqHeaders);
      r.pairsOf = reqHeaders.length;
    }
    this.stream = { id, req: r, reqHeaders, reqPairs: r.pairs, respHeaders: null, local: null };
    const s = this.stream;
    this.call('proxy_on_context_create', id, this.root);
    const action = this.call('proxy_on_request_headers', id, reqHeaders.length, 1);
    let status;
    if (s.local) {
      status = s.local.status;
    } else {
      s.respHeaders = [[':status', '200']];
      this.call('proxy_on_response_headers', id, 1, 1);
      status = 200;
    }
    this.call('proxy_on_log', id);
    this.call('proxy_on_done', id);
    this.call('proxy_on_delete', id);
    this.stream = null;
    return { status, action, local: s.local, response: s.respHeaders };
  }
}

function ms(ns) { return Number(ns) / 1e6; }

// markPhases is set by a job's phase_markers: mark then writes a line "@@PHASE name" before
// each start-up step and request, so that a V8 trace written to the same output (for example
// --trace-wasm-compilation-times, read by scripts/v8-compile-phases.sh) can be split by step.
let markPhases = false;
function mark(name) { if (markPhases) console.log('@@PHASE ' + name); }

// cpuMS is the process's CPU time so far (user and system, every thread), in milliseconds. On
// a shared machine a step's CPU time moves far less than its wall time, which waits for the
// cores other processes hold.
function cpuMS() { const u = process.cpuUsage(); return (u.user + u.system) / 1000; }

function main() {
  const job = JSON.parse(fs.readFileSync(0, 'utf8'));
  markPhases = !!job.phase_markers;
  const shared = new SharedData();
  const metrics = new Map();
  const logs = [];
  const out = { logs };
  const t0 = process.hrtime.bigint();
  const module = new WebAssembly.Module(fs.readFileSync(job.module));
  const t1 = process.hrtime.bigint();
  const c1 = cpuMS();
  out.compile_ms = ms(t1 - t0);
  const mk = () => new VM(module, { vmId: job.vm_id || 'ratelimit', pluginConfig: enc.encode(job.config || ''), shared, metrics, logs });

  if (job.mode === 'init') {
    // The floor of start-up: instantiate and _initialize only (an empty Go reactor).
    const vm = mk();
    const t2 = process.hrtime.bigint();
    mark('init');
    vm.call('_initialize');
    out.first_vm_ms = ms(process.hrtime.bigint() - t1);
    out.first_vm_cpu_ms = cpuMS() - c1;
    out.phases_ms = { instantiate: ms(t2 - t1), initialize: ms(process.hrtime.bigint() - t2) };
  } else {
    const workers = [];
    for (let i = 0; i < (job.workers || 1); i++) {
      const s = process.hrtime.bigint();
      const cs = cpuMS();
      const vm = mk();
      const instantiated = process.hrtime.bigint();
      out.configured = vm.start();
      if (i === 0) {
        out.first_vm_ms = ms(process.hrtime.bigint() - s);
        out.first_vm_cpu_ms = cpuMS() - cs;
        out.phases_ms = { instantiate: ms(instantiated - s), ...vm.phases };
        out.memory_bytes = { configure: vm.mem().buffer.byteLength };
      }
      if (!out.configured) break;
      workers.push(vm);
    }
    if (out.configured) {
      out.results = [];
      (job.requests || []).forEach((r, i) => {
        const s = process.hrtime.bigint();
        const cs = cpuMS();
        mark('request' + i);
        const res = workers[r.worker || 0].request(r);
        if (i === 0) {
          out.first_request_ms = ms(process.hrtime.bigint() - s);
          out.first_request_cpu_ms = cpuMS() - cs;
          out.memory_bytes.request = workers[r.worker || 0].mem().buffer.byteLength;
        }
        out.results.push({ status: res.status, headers: res.local ? res.local.headers : res.response, body: res.local ? res.local.body : '' });
      });
      if (job.bench) {
        // Guest time per request: warm up, then time only the calls into the VM.
        const vm = workers[0];
        // With new_clients each request is another object from another address, all made
        // before the loop (the header map of each is serialised on its first send, outside
        // the guest's time, like the one request's).
        const total = job.bench.warmup + job.bench.rounds * job.bench.n;
        const reqs = job.bench.new_clients
          ? Array.from({ length: total }, (_, i) => ({ ...job.bench.request,
            source: `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}:5555` }))
          : [job.bench.request];
        let sent = 0;
        const next = () => reqs[sent++ % reqs.length];
        for (let i = 0; i < job.bench.warmup; i++) vm.request(next());
        // Each request's guest time is kept too, in an array made before the rounds so that
        // the loop allocates nothing: a round's mean takes in every preemption and garbage
        // collection of the Node process, while the median request ran undisturbed, which is
        // the statistic wasmhost/moduletest's BenchmarkGuestPerRequest reports on wazero.
        const samples = [];
        const each = new Float64Array(job.bench.rounds * job.bench.n);
        let k = 0;
        for (let round = 0; round < job.bench.rounds; round++) {
          const g0 = vm.guestNs;
          let last = g0;
          for (let i = 0; i < job.bench.n; i++) {
            vm.request(next());
            const now = vm.guestNs;
            each[k++] = Number(now - last);
            last = now;
          }
          samples.push(Number(vm.guestNs - g0) / job.bench.n);
        }
        samples.sort((a, b) => a - b);
        out.guest_ns_per_request = samples[samples.length >> 1];
        out.guest_ns_samples = samples;
        each.sort(); // a typed array sorts numerically
        out.guest_p50_ns = each.length > 0 ? each[each.length >> 1] : 0;
      }
    }
    out.shared_keys = shared.map.size;
    out.metrics = Object.fromEntries([...metrics].map(([k, m]) => [k, Number(m.value)]));
  }
  process.stdout.write(JSON.stringify(out));
}

main();
