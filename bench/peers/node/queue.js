// The job-queue lab's BullMQ side (bench/queue.sh), the peer of examples/queue_lab.rs: one
// job is {n: N}, whose consumer computes 1² + … + N². The queue is `lab`; jobs get 3 attempts
// with an exponential backoff from 1 s, as Brisk's queue by default.
//
//   LAB_REDIS=redis://127.0.0.1:6390 LAB_HTTP=8091 node queue.js serve
//       GET / answers "Hello World"; GET /enqueue adds a job first
//   LAB_REDIS=… LAB_CONSUMERS=4 node queue.js work
//       a Worker runs the jobs, 4 at a time
//   LAB_REDIS=… node queue.js push JOBS IN_FLIGHT
//       adds JOBS jobs, IN_FLIGHT at a time, waits until none is left waiting or active, and
//       prints {"jobs", "seconds", "cpu_seconds"} (its own CPU time) as JSON
//   LAB_REDIS=… node queue.js fill JOBS IN_FLIGHT
//       the same without the wait: fills the queue for a consumer started after
//   LAB_REDIS=… node queue.js drain
//       waits until a consumer has taken the first job, then until none is left waiting or
//       active, and prints {"jobs", "seconds"}: the jobs and the time from that first take
'use strict';
const http = require('http');
const { Queue, Worker } = require('bullmq');

const url = new URL(process.env.LAB_REDIS || 'redis://127.0.0.1:6379');
const connection = { host: url.hostname, port: Number(url.port || 6379), maxRetriesPerRequest: null };
const jobOptions = { attempts: 3, backoff: { type: 'exponential', delay: 1000 } };
const payload = { n: 1000 };

function sumOfSquares(n) {
  return (n * (n + 1) * (2 * n + 1)) / 6;
}

async function left(queue) {
  const c = await queue.getJobCounts('wait', 'active', 'delayed', 'prioritized', 'waiting-children');
  return Object.values(c).reduce((a, b) => a + b, 0);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function drain() {
  const queue = new Queue('lab', { connection });
  const full = await left(queue);
  while ((await left(queue)) === full) await sleep(1);
  const start = process.hrtime.bigint();
  while ((await left(queue)) > 0) await sleep(2);
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  console.log(JSON.stringify({ jobs: full, seconds }));
  await queue.close();
}

async function push(jobs, inFlight, wait) {
  const queue = new Queue('lab', { connection });
  const start = process.hrtime.bigint();
  let next = 0;
  const pusher = async () => {
    while (next < jobs) {
      next += 1;
      await queue.add('job', payload, jobOptions);
    }
  };
  await Promise.all(Array.from({ length: inFlight }, pusher));
  while (wait && (await left(queue)) > 0) await sleep(2);
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  const cpu = process.cpuUsage();
  console.log(JSON.stringify({ jobs, seconds, cpu_seconds: (cpu.user + cpu.system) / 1e6 }));
  await queue.close();
}

const mode = process.argv[2];
const exit = [() => process.exit(0), (e) => { console.error(e); process.exit(1); }];
if (mode === 'push' || mode === 'fill') {
  push(Number(process.argv[3] || 10000), Number(process.argv[4] || 50), mode === 'push').then(...exit);
} else if (mode === 'drain') {
  drain().then(...exit);
} else if (mode === 'work') {
  const concurrency = Number(process.env.LAB_CONSUMERS || 1);
  const worker = new Worker('lab', async (job) => sumOfSquares(job.data.n), { connection, concurrency });
  worker.on('error', (e) => console.error(e.message));
  process.on('SIGTERM', () => worker.close().then(() => process.exit(0)));
} else if (mode === 'serve') {
  const queue = new Queue('lab', { connection });
  http.createServer(async (req, res) => {
    if (req.url === '/enqueue') {
      try {
        await queue.add('job', payload, jobOptions);
      } catch (e) {
        res.writeHead(503);
        res.end(String(e.message));
        return;
      }
    }
    res.end('Hello World');
  }).listen(Number(process.env.LAB_HTTP || 8091), '127.0.0.1');
} else {
  console.error('usage: node queue.js serve|work|push JOBS IN_FLIGHT|fill JOBS IN_FLIGHT|drain');
  process.exit(2);
}
