// BullMQ's runner on Node.js: `node bench/runners/bullmq_runner.cjs <dir> '<json config>'`, where
// <dir>/node_modules holds bullmq and ioredis (bench/peers.py installs them). It speaks the same
// line protocol as the Python runners (bench/runners/common.py): one JSON object per line on
// stdout, `{"event": "...", ...}`, and uses only BullMQ, ioredis and Node's own modules.
//
// The worker is BullMQ's documented `new Worker(queue, processor, {connection, concurrency: C})`,
// its other settings at their defaults; jobs are added with `removeOnComplete: {count: 1000}` and
// `removeOnFail: {count: 5000}`, as BullMQ's guide recommends for production. Completions are
// counted by the worker's `completed` and `failed` events, emitted once the job is settled.
// BullMQ hands its processors no Redis client: `incr_handler` is the body's own, an ioredis
// client with its defaults (the client BullMQ itself uses).
//
// Measured as the Python runners measure: CPU is the process's user + system time (all its
// threads, `process.cpuUsage()`), on-CPU and run-queue time of the event loop's thread from its
// /proc/self/task/<pid>/schedstat,
// RSS from /proc/self/status; a round trip is one write on a socket (ioredis writes a command
// alone, a pipeline or MULTI in one write). Node has one event loop, libuv's, and V8's default
// garbage collector settings: the Python runners' loop and tuning have no counterpart here.
"use strict";

const fs = require("node:fs");
const net = require("node:net");

const modules = process.argv[2];
const cfg = JSON.parse(process.argv[3]);
const load = (name) => require(require.resolve(name, { paths: [modules] }));
const { Queue, Worker } = load("bullmq");
const IORedis = load("ioredis");

const BODY_KEY = "bench:body:counter";
const CPU_WORK_S = 0.001;
const KEEP = { removeOnComplete: { count: 1000 }, removeOnFail: { count: 5000 } };
const BATCH = 1000;

function emit(event, fields = {}) {
  fs.writeSync(1, JSON.stringify({ event, ...fields }) + "\n");
}

function finish() {
  process.exit(0); // teardown is not measured (as common.finish)
}

const sends = { count: 0, body: 0 };
const write = net.Socket.prototype.write;
net.Socket.prototype.write = function counted(...args) {
  sends.count += 1;
  return write.apply(this, args);
};

function cpuSeconds() {
  const used = process.cpuUsage();
  return (used.user + used.system) / 1e6;
}

function schedSeconds() {
  // The main thread's alone: V8's helper threads wait for the pinned core while the loop runs,
  // and summing them would count that wait twice.
  try {
    const stat = fs.readFileSync(`/proc/self/task/${process.pid}/schedstat`, "utf8");
    const [ran, waited] = stat.split(" ");
    return [Number(ran) / 1e9, Number(waited) / 1e9];
  } catch {
    return [0, 0];
  }
}

function memoryKb() {
  const found = {};
  for (const line of fs.readFileSync("/proc/self/status", "utf8").split("\n")) {
    const [key, rest] = line.split(":");
    if (key === "VmRSS" || key === "VmHWM") found[key] = parseInt(rest, 10);
  }
  return found;
}

function percentile(values, p) {
  const ordered = [...values].sort((a, b) => a - b);
  const rank = Math.max(1, Math.min(ordered.length, Math.ceil((p / 100) * ordered.length)));
  return ordered[rank - 1];
}

class Tally {
  constructor() {
    this.n = 0;
    this.started = 0;
    this.latencies = [];
    this.onAllStarted = null;
  }

  start() {
    if (this.started === 0) {
      this.firstStart = Date.now() / 1000;
      this.cpu = cpuSeconds();
      this.sends = sends.count;
      this.body = sends.body;
      this.sched = schedSeconds();
    }
    this.started += 1;
    if (this.started === this.n && this.onAllStarted) this.onAllStarted();
  }

  probe(enqueuedAt) {
    this.latencies.push(Date.now() - enqueuedAt * 1000);
    this.start();
  }

  doneFields(completed) {
    const [onCpu, waiting] = schedSeconds();
    const fields = {
      on_cpu_s: onCpu - this.sched[0],
      cpu_wait_s: waiting - this.sched[1],
      completed,
      first_start: this.firstStart,
      last_finish: Date.now() / 1000,
      cpu_s: cpuSeconds() - this.cpu,
      sends: sends.count - this.sends,
      body_sends: sends.body - this.body,
    };
    const lat = this.latencies;
    if (lat.length) {
      Object.assign(fields, {
        count: lat.length,
        p50_ms: percentile(lat, 50),
        p99_ms: percentile(lat, 99),
        max_ms: Math.max(...lat),
      });
    }
    return fields;
  }
}

const TALLY = new Tally();
let bodyClient = null;

async function bodyIncr() {
  if (bodyClient === null) bodyClient = new IORedis(cfg.url);
  sends.body += 1;
  await bodyClient.incr(BODY_KEY);
}

function burnCpu(seconds = CPU_WORK_S) {
  const until = cpuSeconds() + seconds; // the process's CPU time: the loop is one thread
  while (cpuSeconds() < until);
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

const TASKS = {
  noop: async () => TALLY.start(),
  sleep1ms: async () => {
    TALLY.start();
    await sleep(1);
  },
  incr: async () => {
    TALLY.start();
    await bodyIncr();
  },
  incr_handler: async () => {
    TALLY.start();
    await bodyIncr();
  },
  incr_cpu1ms: async () => {
    TALLY.start();
    await bodyIncr();
    burnCpu();
  },
  hold: async ({ seconds }) => {
    TALLY.start();
    await sleep(seconds * 1000);
  },
  probe: async ({ t }) => TALLY.probe(t),
};

function connection() {
  const url = new URL(cfg.url);
  return { host: url.hostname, port: Number(url.port || 6379), db: Number(url.pathname.slice(1) || 0) };
}

function queueOf() {
  return new Queue(cfg.queue, { connection: connection(), defaultJobOptions: KEEP });
}

async function concurrently(count, width, send) {
  let remaining = count;
  const lane = async () => {
    while (remaining > 0) {
      remaining -= 1;
      await send();
    }
  };
  await Promise.all(Array.from({ length: Math.min(width, count) }, lane));
}

async function addBulk(queue, total, name, data) {
  for (let start = 0; start < total; start += BATCH) {
    const count = Math.min(BATCH, total - start);
    await queue.addBulk(Array.from({ length: count }, () => ({ name, data })));
  }
}

const MODES = {
  async enqueue() {
    const queue = queueOf();
    const one = () => queue.add("noop", {});
    let begun = performance.now();
    for (let i = 0; i < cfg.single; i++) await one();
    const single_s = (performance.now() - begun) / 1000;
    begun = performance.now();
    await concurrently(cfg.concurrent, cfg.width, one);
    const concurrent_s = (performance.now() - begun) / 1000;
    begun = performance.now();
    await addBulk(queue, cfg.bulk, "noop", {});
    emit("done", { single_s, concurrent_s, bulk_s: (performance.now() - begun) / 1000 });
  },

  async fill() {
    await addBulk(queueOf(), cfg.n, cfg.task, cfg.kwargs || {});
    emit("done");
  },

  async produce() {
    const queue = queueOf();
    const begun = performance.now();
    for (let i = 0; i < cfg.n; i++) {
      const delay = begun + (i * 1000) / cfg.rate - performance.now();
      if (delay > 0) await sleep(delay);
      await queue.add("probe", { t: Date.now() / 1000 });
    }
    emit("done");
  },

  async drain() {
    const { worker, allStarted, allDone } = await startWorker(cfg.n);
    emit("ready", memoryKb());
    await allStarted;
    await allDone;
    emit("done", TALLY.doneFields(worker.settled));
    finish();
  },

  async hold() {
    const { allStarted } = await startWorker(cfg.k);
    emit("ready", memoryKb());
    await allStarted;
    emit("held", memoryKb());
    await new Promise(() => {});
  },
};

async function startWorker(n) {
  TALLY.n = n;
  const allStarted = new Promise((resolve) => (TALLY.onAllStarted = resolve));
  let settle;
  const allDone = new Promise((resolve) => (settle = resolve));
  const processor = (job) => TASKS[job.name](job.data);
  const worker = new Worker(cfg.queue, processor, {
    connection: connection(),
    concurrency: cfg.concurrency,
  });
  worker.settled = 0;
  const counted = () => {
    worker.settled += 1;
    if (worker.settled === n) settle();
  };
  worker.on("completed", counted);
  worker.on("failed", counted);
  worker.on("error", (err) => {
    emit("error", { error: String(err) });
    finish();
  });
  await worker.waitUntilReady();
  return { worker, allStarted, allDone };
}

MODES[cfg.mode]()
  .then(() => finish())
  .catch((err) => {
    emit("error", { error: String(err && err.stack ? err.stack : err) });
    finish();
  });
