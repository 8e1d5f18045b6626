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
// Values are copied in on a write and out on a read.
//
// A new client's entries are cold in the CPU's caches, so a lookup touches few places: keys
// are found by the bytes the guest passed, without making a string of them, in a table per
// vm_id (open addressing, linear probing) of entry numbers placed by the key's FNV-1a hash;
// an entry is six numbers of one Int32Array (META: where its key is, the sizes, CAS, the
// hash) and its key and value lie side by side in one array of every entry's bytes. A value
// that outgrows its entry's room moves to the end (nothing is deleted, as in Envoy).
const KEY_AT = 0, KEY_LEN = 1, VALUE_LEN = 2, ROOM = 3, CAS = 4, HASH = 5, META = 6;

class SharedData {
  constructor() {
    this.stores = new Map();
    this.nextCas = 0;
    this.size = 0;
    this.meta = new Int32Array(META << 10);
    this.bytes = new Uint8Array(1 << 16);
    this.used = 0;
  }
  // store returns the table of one vm_id's keys: its slots hold entry numbers plus 1 (0: empty).
  store(vmId) {
    let m = this.stores.get(vmId);
    if (m === undefined) this.stores.set(vmId, m = { slots: new Int32Array(1024), count: 0 });
    return m;
  }
  // slot returns the index in m.slots of the key mem[p, p+n), whose hash is h, or of the
  // empty slot where it would go.
  slot(m, h, mem, p, n) {
    const slots = m.slots, mask = slots.length - 1, meta = this.meta, bytes = this.bytes;
    for (let s = h & mask; ; s = (s + 1) & mask) {
      const e = slots[s] - 1;
      if (e < 0) return s;
      if (meta[META * e + HASH] !== h || meta[META * e + KEY_LEN] !== n) continue;
      const at = meta[META * e + KEY_AT];
      let i = 0;
      while (i < n && bytes[at + i] === mem[p + i]) i++;
      if (i === n) return s;
    }
  }
  // get returns the number of the entry of the key mem[p, p+n) in store m, or -1.
  get(m, mem, p, n) { return m.slots[this.slot(m, hashBytes(mem, p, n), mem, p, n)] - 1; }
  value(e) {
    const at = this.meta[META * e + KEY_AT] + this.meta[META * e + KEY_LEN];
    return this.bytes.subarray(at, at + this.meta[META * e + VALUE_LEN]);
  }
  cas(e) { return this.meta[META * e + CAS] >>> 0; }
  // set writes the value mem[vp, vp+vn) to the key mem[kp, kp+kn) of store m.
  set(m, mem, kp, kn, vp, vn, cas) {
    const h = hashBytes(mem, kp, kn);
    const s = this.slot(m, h, mem, kp, kn);
    let e = m.slots[s] - 1;
    if (e >= 0 && cas !== 0 && cas !== this.cas(e)) return CAS_MISMATCH;
    this.nextCas = (this.nextCas + 1) >>> 0;
    if (this.nextCas === 0) this.nextCas = 1;
    if (e < 0) {
      e = this.size++;
      if (META * this.size > this.meta.length) this.meta = grown(this.meta, META * this.size);
      const at = this.room(kn + vn);
      this.bytes.set(mem.subarray(kp, kp + kn), at);
      this.meta.set([at, kn, 0, vn, 0, h], META * e);
      m.slots[s] = e + 1;
      if (2 * ++m.count > m.slots.length) this.rehash(m);
    } else if (vn > this.meta[META * e + ROOM]) {
      const at = this.room(kn + vn), from = this.meta[META * e + KEY_AT];
      this.bytes.copyWithin(at, from, from + kn);
      this.meta[META * e + KEY_AT] = at;
      this.meta[META * e + ROOM] = vn;
    }
    const meta = this.meta;
    meta[META * e + VALUE_LEN] = vn;
    meta[META * e + CAS] = this.nextCas;
    this.bytes.set(mem.subarray(vp, vp + vn), meta[META * e + KEY_AT] + kn);
    return OK;
  }
  // rehash doubles the slots of store m, kept at most half full.
  rehash(m) {
    const old = m.slots, slots = new Int32Array(2 * old.length), mask = slots.length - 1;
    for (const x of old) {
      if (x === 0) continue;
      let s = this.meta[META * (x - 1) + HASH] & mask;
      while (slots[s] !== 0) s = (s + 1) & mask;
      slots[s] = x;
    }
    m.slots = slots;
  }
  // room returns the offset of n unused bytes at the end of this.bytes.
  room(n) {
    if (this.used + n > this.bytes.length) this.bytes = grown(this.bytes, this.used + n);
    this.used += n;
    return this.used - n;
  }
}

// grown returns a copy of the typed array a at least n long, twice as long or more.
function grown(a, n) {
  const b = new a.constructor(Math.max(2 * a.length, n));
  b.set(a);
  return b;
}

// hashBytes returns the 32-bit FNV-1a hash of mem[p, p+n), as a small integer.
function hashBytes(mem, p, n) {
  let h = 0x811c9dc5;
  for (let i = 0; i < n; i++) h = Math.imul(h ^ mem[p + i], 16777619);
  return h >>> 1; // 31 bits: a small integer, which V8 keeps unboxed
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
    this.opts = opts; // {vmId, pluginConfig, shared, metrics, metricsById, logs}
    this.nextId = 1;
    this.stream = null;
    this.guestNs = 0n;
    this.sharedStore = opts.shared.store(opts.vmId);
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
        const e = opts.shared.get(self.sharedStore, self.u8(), kp, kn);
        if (e < 0) return NOT_FOUND;
        const st = self.give(opts.shared.value(e), vp, vs);
        if (st === OK) self.view().setUint32(cp, opts.shared.cas(e), true);
        return st;
      },
      proxy_set_shared_data: (kp, kn, vp, vn, cas) =>
        opts.shared.set(self.sharedStore, self.u8(), kp, kn, vp, vn, cas >>> 0),
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
        if (!opts.metrics.has(name)) {
          const m = { id: opts.metrics.size + 1, value: 0 };
          opts.metrics.set(name, m);
          opts.metricsById.push(m);
        }
        self.view().setUint32(ip, opts.metrics.get(name).id, true);
        return OK;
      },
      // A metric's value is a Number (exact to 2^53): BigInt arithmetic allocates.
      proxy_increment_metric: (id, d) => { const m = opts.metricsById[id - 1]; if (m) m.value += Number(d); return OK; },
      proxy_record_metric: (id, v) => { const m = opts.metricsById[id - 1]; if (m) m.value = Number(v); return OK; },
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
  // u8 returns a Uint8Array of the whole memory, made again only when the memory grew.
  u8() {
    const buf = this.x.memory.buffer;
    if (this.mem8 === undefined || this.mem8.buffer !== buf) this.mem8 = new Uint8Array(buf);
    return this.mem8;
  }
  bytes(p, n) { return new Uint8Array(this.x.memory.buffer, p, n).slice(); }
  str(p, n) { return dec.decode(new Uint8Array(this.x.memory.buffer, p, n)); }

  // give copies b into guest memory obtained from the guest's allocator, as Envoy does, and
  // writes its address and size where the guest asked.
  give(b, pp, sp) {
    if (b === undefined || b === null) return NOT_FOUND;
    const p = b.length === 0 ? 0 : this.x.proxy_on_memory_allocate(b.length);
    if (b.length !== 0 && p === 0) return BAD_ARGUMENT;
    if (b.length) this.u8().set(b, p);
    const v = this.view();
    v.setUint32(pp, p, true);
    v.setUint32(sp, b.length, true);
    return OK;
  }

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
      case 'source\0address': return r.sourceBytes;
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
    // The request's serialised header map and source address are made outside the guest's
    // time, as Envoy's header map and connection are C++ data the guest's calls only copy; they
    // are kept on the request object, which the benchmark loop sends again and again (a request
    // is never changed once sent).
    if (r.pairs === undefined || r.pairsOf !== reqHeaders.length) {
      r.pairs = this.pairs(reqHeaders);
      r.pairsOf = reqHeaders.length;
      r.sourceBytes = enc.encode(r.source || '127.0.0.1:50000');
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
  const metrics = new Map(), metricsById = [];
  const logs = [];
  const out = { logs };
  const t0 = process.hrtime.bigint();
  const module = new WebAssembly.Module(fs.readFileSync(job.module));
  const t1 = process.hrtime.bigint();
  const c1 = cpuMS();
  out.compile_ms = ms(t1 - t0);
  const mk = () => new VM(module, { vmId: job.vm_id || 'ratelimit', pluginConfig: enc.encode(job.config || ''), shared, metrics, metricsById, logs });

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
        const b = job.bench;
        const measured = { vm: workers[0], next: benchRequests(b.request, b.new_clients ? Infinity : 0) };
        const cases = [measured];
        // A baseline's VM: the same module, a vm_id and shared data of its own.
        const baseline = (vmId, config, population) => {
          const vm = new VM(module, { vmId, pluginConfig: enc.encode(config), shared: new SharedData(), metrics: new Map(), metricsById: [], logs });
          if (!vm.start()) throw new Error(`host: the configuration of ${vmId} was refused`);
          cases.push({ vm, next: benchRequests(b.request, population) });
          return cases[cases.length - 1];
        };
        const same = b.same_client !== undefined ? baseline('same-client', b.same_client, 0) : null;
        const clients = b.clients !== undefined ? baseline('returning-clients', b.clients, b.population) : null;
        const samples = bench(cases, b.warmup, b.rounds, b.n);
        out.guest_ns_per_request = samples[samples.length >> 1];
        out.guest_ns_samples = samples;
        out.guest_p50_ns = measured.p50;
        if (same) out.same_client_p50_ns = same.p50;
        if (clients) out.returning_clients_p50_ns = clients.p50;
      }
    }
    out.shared_keys = shared.size;
    out.metrics = Object.fromEntries([...metrics].map(([k, m]) => [k, Number(m.value)]));
  }
  process.stdout.write(JSON.stringify(out));
}

// benchRequests returns the function that gives a benchmark's next request: with population 0,
// base itself, sent again and again by one client; with Infinity, a new client on every
// request; otherwise a population of returning clients, each sending one of the first
// population requests (placing its keys), every later request from one of them in a fixed
// shuffled order, each client coming back once in every population requests. The clients are
// 10.a.b.c, and each of their requests is made just before it is sent (its header map
// serialised on its send, outside the guest's time, like the one client's first), so that its
// data is as fresh in the CPU's caches as a request Envoy has just read: only the filter's
// shared data is cold for them. Every request has the fields of benchRequest, in its order, so
// that every one has the same shape (V8's hidden class) and the host functions that read them
// stay as fast for many clients as for one, as Envoy's C++ request data does.
function benchRequests(base, population) {
  if (population === 0) {
    const r = benchRequest(base, base.source);
    return () => r;
  }
  const order = shuffled(population === Infinity ? 0 : population);
  let sent = 0;
  return () => {
    const i = sent < population ? sent : order[(sent - population) % population];
    sent++;
    return benchRequest(base, `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}:5555`);
  };
}

// shuffled returns the numbers 0 to n-1 in an order shuffled by a fixed seed (Fisher-Yates
// with a 32-bit xorshift), the same in every run.
function shuffled(n) {
  const a = Int32Array.from({ length: n }, (_, i) => i);
  let x = 2463534242;
  for (let i = n - 1; i > 0; i--) {
    x ^= x << 13; x ^= x >>> 17; x ^= x << 5;
    const j = (x >>> 0) % (i + 1);
    [a[i], a[j]] = [a[j], a[i]];
  }
  return a;
}

// benchRequest returns a request like base from source, its serialised fields still to make.
function benchRequest(base, source) {
  return { method: base.method, path: base.path, authority: base.authority, route: base.route, vhost: base.vhost,
    headers: base.headers, source, pairs: undefined, pairsOf: 0, sourceBytes: undefined };
}

// benchBlock is how many requests a case sends before the next case's turn (see bench).
const benchBlock = 100;

// bench measures the guest time per request of cases (each {vm, next}): warmup requests each,
// then rounds of n requests each, the cases taking turns by blocks of benchBlock requests, so
// that every case meets the same load on the machine (a whole round can run 1.7x slower than
// the next when other processes share the cores). It sets each case's p50, the median of its
// requests' own guest times, and returns the first case's rounds' means per request, sorted.
//
// A round's mean takes in every preemption and garbage collection of the Node process, while
// the median request ran undisturbed, which is the statistic wasmhost/moduletest's
// BenchmarkGuestPerRequest reports on wazero. The arrays are made before the rounds so that
// the loop allocates nothing of its own.
function bench(cases, warmup, rounds, n) {
  for (const c of cases) {
    for (let i = 0; i < warmup; i++) c.vm.request(c.next());
    c.each = new Float64Array(rounds * n);
    c.k = 0;
  }
  const samples = [];
  for (let round = 0; round < rounds; round++) {
    const g0 = cases[0].vm.guestNs;
    for (let sent = 0; sent < n; sent += benchBlock) {
      for (const c of cases) {
        const vm = c.vm;
        let last = vm.guestNs;
        for (let i = sent; i < n && i < sent + benchBlock; i++) {
          vm.request(c.next());
          const now = vm.guestNs;
          c.each[c.k++] = Number(now - last);
          last = now;
        }
      }
    }
    samples.push(Number(cases[0].vm.guestNs - g0) / n);
  }
  for (const c of cases) {
    c.each.sort(); // a typed array sorts numerically
    c.p50 = c.each.length > 0 ? c.each[c.each.length >> 1] : 0;
  }
  return samples.sort((a, b) => a - b);
}

// Run as a program, the host does the job on its standard input; required as a module (by
// the shared data's test), it exports its shared data.
if (require.main === module) main();
else module.exports = { SharedData, hashBytes, OK, CAS_MISMATCH };
