#!/usr/bin/env node
// PouchDB replication throughput against any CouchDB-compatible server (Chaise, CouchDB).
//
//   (cd bench/http && npm install)                       # pouchdb + pouchdb-adapter-memory, once
//   node bench/http/replication.mjs http://admin:admin@127.0.0.1:5984
//
// pull  seeds bench_repl_src on the server with DOCS small docs (_bulk_docs, 1,000 a request, one
//       client), then times PouchDB.replicate(<server>/bench_repl_src -> fresh memory PouchDB).
// push  fills a memory PouchDB with DOCS small docs (bulkDocs of 1,000, untimed), creates a fresh
//       bench_repl_dst on the server and times PouchDB.replicate(memory PouchDB -> <server>/bench_repl_dst).
// Both replications use the same options (PouchDB's defaults unless BATCH_SIZE / BATCHES_LIMIT are set:
// batch_size 100, batches_limit 10) and are one-shot (no live, no retry). Each is checked afterwards:
// the replication result must be ok with docs_written = DOCS and the target must hold DOCS docs.
// Rate = DOCS / wall time of the replicate() call, in docs/s.
// Environment: DOCS (default 100000), BATCH_SIZE, BATCHES_LIMIT, WORKLOADS ("pull push").
// Both databases are deleted at the end.
import { createRequire } from 'node:module';
import { performance } from 'node:perf_hooks';

const require = createRequire(import.meta.url);
const PouchDB = require('pouchdb');
PouchDB.plugin(require('pouchdb-adapter-memory'));

const DOCS = Number(process.env.DOCS || 100000);
const WORKLOADS = (process.env.WORKLOADS || 'pull push').split(/\s+/);
const SRC = 'bench_repl_src';
const DST = 'bench_repl_dst';
const SEED_BATCH = 1000;

const arg = process.argv[2];
if (!arg) {
  console.error('usage: node replication.mjs <base-url>');
  process.exit(2);
}
// fetch() refuses URLs with credentials: keep them aside as a Basic header for the seeding requests.
const u = new URL(arg.replace(/\/+$/, ''));
const headers = { 'Content-Type': 'application/json' };
if (u.username) {
  headers.Authorization =
    'Basic ' + Buffer.from(`${decodeURIComponent(u.username)}:${decodeURIComponent(u.password)}`).toString('base64');
}
const plainBase = `${u.protocol}//${u.host}${u.pathname.replace(/\/+$/, '')}`;
const pouchBase = arg.replace(/\/+$/, ''); // PouchDB takes the credentials from the URL itself

async function http(method, path, body) {
  const res = await fetch(plainBase + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await res.text();
  let json;
  try { json = JSON.parse(text); } catch { json = text; }
  return { status: res.status, json };
}
async function freshDb(name) {
  await http('DELETE', `/${name}`);
  const r = await http('PUT', `/${name}`);
  if (r.status !== 201) throw new Error(`cannot create ${name}: HTTP ${r.status} ${JSON.stringify(r.json)}`);
}
async function docCount(name) {
  const r = await http('GET', `/${name}`);
  if (r.status !== 200) throw new Error(`GET /${name}: HTTP ${r.status} ${JSON.stringify(r.json)}`);
  return r.json.doc_count;
}
function makeDocs(from, n) {
  const docs = [];
  for (let i = from; i < from + n; i++) {
    docs.push({ _id: `doc${String(i).padStart(7, '0')}`, type: 'small', n: i, note: 'hello replication' });
  }
  return docs;
}

const opts = {};
if (process.env.BATCH_SIZE) opts.batch_size = Number(process.env.BATCH_SIZE);
if (process.env.BATCHES_LIMIT) opts.batches_limit = Number(process.env.BATCHES_LIMIT);
const optsText = `batch_size ${opts.batch_size ?? '100 (default)'}, batches_limit ${opts.batches_limit ?? '10 (default)'}`;

function check(what, res) {
  if (!res.ok || res.docs_written !== DOCS || (res.errors && res.errors.length)) {
    throw new Error(`${what}: ok=${res.ok} status=${res.status} docs_read=${res.docs_read} docs_written=${res.docs_written} ` +
      `doc_write_failures=${res.doc_write_failures} errors=${JSON.stringify(res.errors).slice(0, 500)}`);
  }
}
const fmt = (n) => Math.round(n).toLocaleString('en-US');

const welcome = await http('GET', '/');
console.log(`server: ${plainBase} (${JSON.stringify(welcome.json).slice(0, 100)})`);
console.log(`pouchdb ${PouchDB.version}, memory adapter, ${DOCS} docs, ${optsText}`);

let failed = false;
try {
  if (WORKLOADS.includes('pull')) {
    await freshDb(SRC);
    let t0 = performance.now();
    for (let i = 0; i < DOCS; i += SEED_BATCH) {
      const r = await http('POST', `/${SRC}/_bulk_docs`, { docs: makeDocs(i, Math.min(SEED_BATCH, DOCS - i)) });
      if (r.status !== 201) throw new Error(`seed _bulk_docs: HTTP ${r.status} ${JSON.stringify(r.json).slice(0, 300)}`);
    }
    let s = (performance.now() - t0) / 1000;
    const seeded = await docCount(SRC);
    if (seeded !== DOCS) throw new Error(`seeded ${SRC} holds ${seeded} docs, not ${DOCS}`);
    console.log(`seed  ${DOCS} docs via _bulk_docs x${SEED_BATCH} (1 client): ${s.toFixed(2)} s = ${fmt(DOCS / s)} docs/s`);

    const remote = new PouchDB(`${pouchBase}/${SRC}`, { skip_setup: true });
    const local = new PouchDB(`pull-${process.pid}-${Date.now()}`, { adapter: 'memory' });
    t0 = performance.now();
    const res = await PouchDB.replicate(remote, local, opts);
    s = (performance.now() - t0) / 1000;
    check('pull', res);
    const n = (await local.info()).doc_count;
    if (n !== DOCS) throw new Error(`pull: local PouchDB holds ${n} docs, not ${DOCS}`);
    console.log(`repl  pull ${DOCS} docs server -> memory PouchDB: ${s.toFixed(2)} s = ${fmt(DOCS / s)} docs/s`);
    await local.destroy();
  }

  if (WORKLOADS.includes('push')) {
    const local = new PouchDB(`push-${process.pid}-${Date.now()}`, { adapter: 'memory' });
    for (let i = 0; i < DOCS; i += SEED_BATCH) {
      const rs = await local.bulkDocs(makeDocs(i, Math.min(SEED_BATCH, DOCS - i)));
      const bad = rs.find((r) => r.error);
      if (bad) throw new Error(`local bulkDocs: ${JSON.stringify(bad)}`);
    }
    await freshDb(DST);
    const remote = new PouchDB(`${pouchBase}/${DST}`, { skip_setup: true });
    const t0 = performance.now();
    const res = await PouchDB.replicate(local, remote, opts);
    const s = (performance.now() - t0) / 1000;
    check('push', res);
    const n = await docCount(DST);
    if (n !== DOCS) throw new Error(`push: ${DST} holds ${n} docs, not ${DOCS}`);
    console.log(`repl  push ${DOCS} docs memory PouchDB -> server: ${s.toFixed(2)} s = ${fmt(DOCS / s)} docs/s`);
    await local.destroy();
  }
} catch (err) {
  failed = true;
  console.error('FAILED:', err && (err.stack || JSON.stringify(err)));
  if (err && typeof err === 'object' && !(err instanceof Error)) console.error(JSON.stringify(err).slice(0, 2000));
} finally {
  for (const name of [SRC, DST]) await http('DELETE', `/${name}`).catch(() => {});
}
process.exit(failed ? 1 : 0);
