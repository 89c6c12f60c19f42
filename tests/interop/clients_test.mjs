#!/usr/bin/env node
// Client-side interoperability test: real npm clients (PouchDB, nano) against a real Chaise.
//
//   CHAISE_BINARY=/path/to/chaise node clients_test.mjs
//
// Starts a fresh chaise on a free loopback port with a temporary data directory (the binary from
// $CHAISE_BINARY, default ../../build/server/chaise relative to this file), stops it by pid at the
// end, also on failure. Then:
//   1. seeds a Chaise db with 5,000 documents (small bodies, ~5% with inline attachments, text and
//      binary, a few of 100 KB+; several revisions on a subset; conflicts written with _bulk_docs
//      new_edits=false; deletions, a recreated tombstone, a design doc, odd ids, a _local doc);
//   2. PouchDB replicates Chaise -> in-memory PouchDB -> a new Chaise db, and the two Chaise dbs
//      must be equal (ids, winning revs, _conflicts, leaf revisions and their histories, deleted
//      docs, attachment stubs, digests and bytes); PouchDB's own winners must agree;
//   3. a replication cancelled part way resumes from its _local checkpoint instead of starting over;
//   4. PouchDB.sync({live:true}) carries changes both ways within a timeout;
//   5. nano's common calls work.
// Every wait has a timeout and the whole run has a watchdog. Prints one line per check and a closing
// "interop: N passed, N failed" line; exits 1 on any failure.
//
// Knobs (env): INTEROP_DOCS (default 5000), INTEROP_DEADLINE_S (watchdog, default 170),
// CHAISE_INTEROP_KEEP=1 keeps the temporary directory (server log in it), INTEROP_VERBOSE=1 times
// every _bulk_docs, INTEROP_DIFF_CHARS (default 700) sets how much of a differing value is shown,
// CHAISE_INTEROP_URL=http://admin:admin@127.0.0.1:5990 runs everything against an already running
// server instead (CouchDB 3.5 passes every check: that is how the test itself is validated).

import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { isDeepStrictEqual } from 'node:util';

import PouchDB from 'pouchdb';
import PouchMemory from 'pouchdb-adapter-memory';
import Nano from 'nano';

PouchDB.plugin(PouchMemory);

const HERE = path.dirname(fileURLToPath(import.meta.url));
const BINARY = path.resolve(process.env.CHAISE_BINARY || path.join(HERE, '../../build/server/chaise'));
const N_DOCS = Number(process.env.INTEROP_DOCS || 5000);
const DEADLINE_S = Number(process.env.INTEROP_DEADLINE_S || 170);
const T0 = Date.now();

// ---------------------------------------------------------------------------------------------
// Reporting

const results = []; // {name, ok, ms, detail}
function elapsed() { return ((Date.now() - T0) / 1000).toFixed(1) + 's'; }
function log(...args) { console.log(`[${elapsed()}]`, ...args); }

class CheckError extends Error {}
function assert(cond, message) { if (!cond) throw new CheckError(message); }
function assertEq(actual, expected, message) {
  if (!isDeepStrictEqual(actual, expected)) {
    throw new CheckError(`${message}: expected ${short(expected)}, got ${short(actual)}`);
  }
}
function short(value, max = 600) {
  let s;
  try { s = typeof value === 'string' ? JSON.stringify(value) : JSON.stringify(value); } catch { s = String(value); }
  if (s === undefined) s = String(value);
  return s.length > max ? s.slice(0, max) + '…' : s;
}

// Runs one named check with a timeout; records pass/fail. Returns the check's value or undefined.
async function check(name, timeoutMs, fn) {
  if (finishing) return undefined; // the watchdog fired: nothing more is run
  const start = Date.now();
  try {
    const value = await withTimeout(fn(), timeoutMs, name);
    const ms = Date.now() - start;
    results.push({ name, ok: true, ms });
    log(`ok     ${name} (${ms} ms)`);
    return value;
  } catch (err) {
    const ms = Date.now() - start;
    if (finishing) return undefined;
    const detail = err instanceof CheckError ? err.message : (err && err.stack) || String(err);
    results.push({ name, ok: false, ms, detail });
    log(`FAILED ${name} (${ms} ms)\n${indent(detail)}`);
    return undefined;
  }
}
function indent(s) { return String(s).split('\n').map((l) => '         ' + l).join('\n'); }

function withTimeout(promise, ms, what) {
  let timer;
  const timeout = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
  });
  return Promise.race([Promise.resolve(promise), timeout]).finally(() => clearTimeout(timer));
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Polls `fn` (truthy = done) every `everyMs` until `timeoutMs`.
async function waitFor(what, timeoutMs, fn, everyMs = 100) {
  const deadline = Date.now() + timeoutMs;
  let last;
  for (;;) {
    try { last = await fn(); } catch (err) { last = err; }
    if (last && !(last instanceof Error)) return last;
    if (Date.now() > deadline) {
      throw new CheckError(`timed out after ${timeoutMs} ms waiting for ${what}` +
                           (last instanceof Error ? ` (last error: ${last.message})` : ''));
    }
    await sleep(everyMs);
  }
}

// ---------------------------------------------------------------------------------------------
// The server

const tmpDir = fs.mkdtempSync(path.join(process.env.TMPDIR || os.tmpdir(), 'chaise-interop-'));
const serverLog = path.join(tmpDir, 'chaise.log');
let server = null; // ChildProcess
let serverExited = null; // {code, signal}
let base = null; // http://127.0.0.1:PORT
// CHAISE_INTEROP_URL=http://user:pass@127.0.0.1:5990 runs the same checks against an already running
// server (e.g. CouchDB, to validate the test itself) instead of starting chaise; its dbs get a
// per-run prefix and are deleted at the end.
const EXTERNAL = process.env.CHAISE_INTEROP_URL ? new URL(process.env.CHAISE_INTEROP_URL) : null;
let credBase = null; // base with credentials, for PouchDB and nano
const ADMIN_USER = 'interop_admin';
const ADMIN_PASSWORD = 'interop-secret';
let authHeader = {};
const DB_PREFIX = EXTERNAL ? `interop_${process.pid}_` : 'interop_';
const createdDbs = [];
function rurl(db) { return `${credBase}/${db}`; }

async function startServer() {
  if (EXTERNAL) {
    const u = new URL(EXTERNAL);
    if (u.username) authHeader = { Authorization: 'Basic ' + Buffer.from(`${decodeURIComponent(u.username)}:${decodeURIComponent(u.password)}`).toString('base64') };
    credBase = u.href.replace(/\/+$/, '');
    u.username = ''; u.password = '';
    base = u.href.replace(/\/+$/, '');
    log(`using the server at ${base} (CHAISE_INTEROP_URL); not starting chaise`);
    return;
  }
  if (!fs.existsSync(BINARY)) throw new Error(`chaise binary not found: ${BINARY} (set CHAISE_BINARY)`);
  const logFd = fs.openSync(serverLog, 'a');
  // A server admin from the environment, as CouchDB's Docker image takes it; every request below
  // authenticates with Basic (PouchDB and nano: credentials in the URL).
  server = spawn(BINARY, ['--port', '0', '--bind', '127.0.0.1', '--data-dir', path.join(tmpDir, 'data')],
                 { stdio: ['ignore', 'pipe', logFd],
                   env: { ...process.env, COUCHDB_USER: ADMIN_USER, COUCHDB_PASSWORD: ADMIN_PASSWORD } });
  fs.closeSync(logFd);
  server.on('exit', (code, signal) => { serverExited = { code, signal }; });
  const port = await withTimeout(new Promise((resolve, reject) => {
    let buffered = '';
    server.stdout.setEncoding('utf8');
    server.stdout.on('data', (chunk) => {
      if (buffered === null) return; // keep draining stdout
      buffered += chunk;
      const m = /chaise listening on (\S+):(\d+)\r?\n/.exec(buffered);
      if (m) { buffered = null; resolve(Number(m[2])); }
    });
    server.on('exit', (code, signal) =>
      reject(new Error(`chaise exited before listening (code ${code}, signal ${signal}); log:\n${logTail()}`)));
    server.on('error', reject);
  }), 30000, 'chaise to print "chaise listening on"');
  base = `http://127.0.0.1:${port}`;
  credBase = `http://${ADMIN_USER}:${ADMIN_PASSWORD}@127.0.0.1:${port}`;
  authHeader = { Authorization: 'Basic ' + Buffer.from(`${ADMIN_USER}:${ADMIN_PASSWORD}`).toString('base64') };
  log(`chaise pid ${server.pid} listening on ${base} (data in ${tmpDir})`);
}

function logTail(lines = 40) {
  try { return fs.readFileSync(serverLog, 'utf8').split('\n').slice(-lines).join('\n'); } catch { return ''; }
}

async function stopServer() {
  if (!server || serverExited) return serverExited;
  const exited = new Promise((resolve) => server.once('exit', (code, signal) => resolve({ code, signal })));
  try { process.kill(server.pid, 'SIGTERM'); } catch {}
  const status = await Promise.race([exited, sleep(10000).then(() => null)]);
  if (status) return status;
  log(`chaise pid ${server.pid} did not stop on SIGTERM within 10 s; SIGKILL`);
  try { process.kill(server.pid, 'SIGKILL'); } catch {}
  return await Promise.race([exited, sleep(5000).then(() => ({ code: null, signal: 'SIGKILL?' }))]);
}

function killServerNow() {
  if (server && !serverExited) { try { process.kill(server.pid, 'SIGKILL'); } catch {} }
}
process.on('exit', () => {
  killServerNow();
  if (process.env.CHAISE_INTEROP_KEEP !== '1') { try { fs.rmSync(tmpDir, { recursive: true, force: true }); } catch {} }
});
for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(sig, () => { log(`got ${sig}; stopping`); killServerNow(); process.exit(2); });
}

// ---------------------------------------------------------------------------------------------
// Plain HTTP against Chaise

async function http(method, urlPath, { body, headers = {}, raw = false, timeoutMs = 30000 } = {}) {
  const init = { method, headers: { Accept: 'application/json', ...authHeader, ...headers }, signal: AbortSignal.timeout(timeoutMs) };
  if (body !== undefined) {
    if (Buffer.isBuffer(body) || typeof body === 'string') init.body = body;
    else { init.body = JSON.stringify(body); init.headers['Content-Type'] = 'application/json'; }
  }
  const res = await fetch(base + urlPath, init);
  const buf = Buffer.from(await res.arrayBuffer());
  let json;
  if (!raw) { try { json = JSON.parse(buf.toString('utf8')); } catch { json = undefined; } }
  return { status: res.status, headers: res.headers, body: raw ? buf : json, text: raw ? undefined : buf.toString('utf8') };
}
async function httpOk(method, urlPath, opts) {
  const r = await http(method, urlPath, opts);
  if (r.status < 200 || r.status >= 300) {
    throw new CheckError(`${method} ${urlPath} -> ${r.status} ${r.text ?? ''}`.slice(0, 1500));
  }
  return r.body;
}
const enc = encodeURIComponent;
function docPath(db, id) {
  if (id.startsWith('_design/')) return `/${db}/_design/${enc(id.slice(8))}`;
  return `/${db}/${enc(id)}`;
}

// Runs `fn` over `items` with at most `limit` in flight.
async function pool(items, limit, fn) {
  const out = new Array(items.length);
  let next = 0;
  async function worker() { while (next < items.length) { const i = next++; out[i] = await fn(items[i], i); } }
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}

// ---------------------------------------------------------------------------------------------
// The data set

// Deterministic PRNG (mulberry32) so that every run writes the same data.
function rng(seed) {
  return () => {
    seed |= 0; seed = (seed + 0x6D2B79F5) | 0;
    let t = Math.imul(seed ^ (seed >>> 15), 1 | seed);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const md5hex = (s) => crypto.createHash('md5').update(s).digest('hex');
const md5digest = (buf) => 'md5-' + crypto.createHash('md5').update(buf).digest('base64');

// Attachment content is a pure function of (doc id, name), so expected bytes are always known.
const BIG = new Set([100, 1300, 2600, 3900].filter((i) => i < N_DOCS)); // docs with 100 KB+ attachments
const attachmentCache = new Map();
function attachmentBytes(id, name) {
  const key = id + '/' + name;
  let buf = attachmentCache.get(key);
  if (!buf) attachmentCache.set(key, buf = makeAttachmentBytes(id, name));
  return buf;
}
function makeAttachmentBytes(id, name) {
  const r = rng(parseInt(md5hex(id + '/' + name).slice(0, 8), 16));
  if (name.endsWith('.txt')) {
    const size = name.startsWith('big') ? 150 * 1024 + 7 : 40 + Math.floor(r() * 2000);
    const words = ['chaise', 'couch', 'pouch', 'sofa', 'ünïcödé', '→', 'lorem', 'ipsum', '\n'];
    const parts = [`${id}/${name}: `];
    let bytes = Buffer.byteLength(parts[0]);
    while (bytes < size) {
      const w = words[Math.floor(r() * words.length)] + ' ';
      parts.push(w);
      bytes += Buffer.byteLength(w);
    }
    return Buffer.from(parts.join(''), 'utf8');
  }
  const size = name.startsWith('big') ? 100 * 1024 + Math.floor(r() * 300 * 1024) : 1 + Math.floor(r() * 8192);
  const buf = Buffer.alloc(size);
  for (let i = 0; i < size; i++) buf[i] = Math.floor(r() * 256);
  return buf;
}
function contentType(name) { return name.endsWith('.txt') ? 'text/plain' : 'application/octet-stream'; }
function inline(id, name) { return { content_type: contentType(name), data: attachmentBytes(id, name).toString('base64') }; }

const idOf = (i) => 'd' + String(i).padStart(5, '0');
const SPECIAL_IDS = ['with space', 'slash/inside', 'ünïcödé-ид', 'plus+sign&amp=1', 'percent%25?q#frag'];

// Model of what was written: id -> {revs: [rev...] (current branch, oldest first), body, atts: Set}
const model = new Map();
const stats = { attachments: 0, bigAttachments: 0, updated: 0, conflicted: 0, deleted: 0, recreated: 0, nefDocs: 0 };

// Writes `docs` with _bulk_docs in chunks of 500. Per-document errors do not stop the seed (so that
// one Chaise bug does not hide everything else): they are collected in `bulkErrors` together with
// the request that caused them, and a separate check fails on them.
const bulkErrors = [];
async function bulk(db, docs, newEdits = true, what = '') {
  const out = [];
  for (let i = 0; i < docs.length; i += 500) {
    const chunk = docs.slice(i, i + 500);
    const t = Date.now();
    const res = await httpOk('POST', `/${db}/_bulk_docs`, { body: newEdits ? { docs: chunk } : { docs: chunk, new_edits: false }, timeoutMs: 60000 });
    if (process.env.INTEROP_VERBOSE) log(`  _bulk_docs ${what} ${chunk.length} docs: ${Date.now() - t} ms`);
    for (const r of res) {
      if (r.ok) continue;
      const sent = chunk.filter((d) => d._id === r.id).map((d) => ({ ...d, _attachments: d._attachments ? '…' : undefined }));
      bulkErrors.push(`${what}: POST /${db}/_bulk_docs${newEdits ? '' : ' new_edits=false'} with ${short(sent, 500)} -> ${short(r)}`);
    }
    out.push(...res);
  }
  return out;
}
function recordRevs(results) {
  for (const r of results) if (r.ok) model.get(r.id).revs.push(r.rev);
}
function stubs(atts) { return Object.fromEntries([...atts].map((n) => [n, { stub: true }])); }
function current(id) { const m = model.get(id); return m.revs[m.revs.length - 1]; }
const revHash = (rev) => rev.slice(rev.indexOf('-') + 1);
const revPos = (rev) => parseInt(rev, 10);

async function seed(db) {
  const r = rng(42);
  await httpOk('PUT', `/${db}`);

  // Phase 1: create. Every 20th doc has attachments (5%): a text one, every 40th a binary one too,
  // four docs carry 100 KB+ attachments (text and binary).
  const ids = [];
  const docs = [];
  for (let i = 0; i < N_DOCS; i++) {
    const id = idOf(i);
    const body = { type: 'item', n: i, name: `item ${i}`, score: Math.round(r() * 1e6) / 100,
                   tags: ['t' + (i % 7), 't' + (i % 11)], nested: { even: i % 2 === 0, s: 'x'.repeat(i % 30) } };
    const atts = new Set();
    if (i % 20 === 0) atts.add('note.txt');
    if (i % 40 === 0) atts.add('blob.bin');
    if (BIG.has(i)) { atts.add('big.bin'); atts.add('big.txt'); stats.bigAttachments += 2; }
    stats.attachments += atts.size;
    const doc = { _id: id, ...body };
    if (atts.size) doc._attachments = Object.fromEntries([...atts].map((n) => [n, inline(id, n)]));
    ids.push(id);
    docs.push(doc);
    model.set(id, { revs: [], body, atts });
  }
  for (const id of SPECIAL_IDS) {
    const body = { type: 'special', label: id };
    model.set(id, { revs: [], body, atts: new Set(['note.txt']) });
    docs.push({ _id: id, ...body, _attachments: { 'note.txt': inline(id, 'note.txt') } });
    stats.attachments += 1;
  }
  const ddoc = { _id: '_design/interop', language: 'javascript',
                 views: { by_n: { map: 'function (doc) { if (doc.n !== undefined) emit(doc.n, null); }' } } };
  model.set(ddoc._id, { revs: [], body: ddoc, atts: new Set() });
  docs.push(ddoc);
  recordRevs(await bulk(db, docs, true, 'create'));

  // Phase 2: more revisions on a subset (1, 3 or 7 extra); attachments kept as stubs, some added
  // in a later revision (revpos > 1), some removed.
  const updateRounds = [];
  for (let i = 0; i < N_DOCS; i++) {
    const extra = i % 63 === 1 ? 7 : i % 21 === 1 ? 3 : i % 7 === 1 ? 1 : (i % 80 === 0 || i % 120 === 0) ? 1 : 0;
    if (extra) stats.updated++;
    for (let k = 0; k < extra; k++) (updateRounds[k] ||= []).push(i);
  }
  updateRounds[0].push(...SPECIAL_IDS.map((_, j) => -1 - j));
  for (let round = 0; round < updateRounds.length; round++) {
    const batch = updateRounds[round].map((i) => {
      const id = i >= 0 ? idOf(i) : SPECIAL_IDS[-1 - i];
      const m = model.get(id);
      m.body = { ...m.body, version: round + 2, updated: true };
      if (round === 0 && i >= 0 && i % 80 === 0) m.atts.add('added.txt');
      if (round === 0 && i >= 0 && i % 120 === 0) m.atts.delete('note.txt');
      const doc = { _id: id, _rev: current(id), ...m.body };
      if (m.atts.size) {
        doc._attachments = stubs(m.atts);
        if (m.atts.has('added.txt') && round === 0 && i % 80 === 0) doc._attachments['added.txt'] = inline(id, 'added.txt');
        stats.attachments += round === 0 && i >= 0 && i % 80 === 0 ? 1 : 0;
      }
      return doc;
    });
    recordRevs(await bulk(db, batch, true, `update round ${round + 1}`));
  }

  // Phase 3: conflicts through _bulk_docs new_edits=false.
  //  - i % 50 == 3: a sibling branch next to the current leaf (a second root when the doc has only
  //    one revision); i % 100 == 3 makes the branch two revisions longer so that it wins;
  //    i % 150 == 3 gives the branch an inline attachment.
  //  - 60 'nef-' documents that only ever existed through new_edits=false: two or three leaves,
  //    some of them deleted.
  const conflictDocs = [];
  for (let i = 3; i < N_DOCS; i += 50) {
    const id = idOf(i);
    const m = model.get(id);
    const tag = (k) => md5hex(`${id}/branch/${k}`);
    const cur = current(id);
    const parent = m.revs.length >= 2 ? m.revs[m.revs.length - 2] : null;
    const startPos = parent ? revPos(parent) + 1 : 1;
    const longer = i % 100 === 3 ? 2 : 0;
    const hashes = Array.from({ length: 1 + longer }, (_, k) => tag(k)).reverse();
    if (parent) hashes.push(revHash(parent));
    const doc = { _id: id, _rev: `${startPos + longer}-${hashes[0]}`, _revisions: { start: startPos + longer, ids: hashes },
                  ...m.body, branch: true, from: cur };
    if (i % 150 === 3) {
      doc._attachments = { ...Object.fromEntries([...m.atts].map((n) => [n, inline(id, n)])), 'branch.txt': inline(id, 'branch.txt') };
    } else if (m.atts.size) {
      doc._attachments = Object.fromEntries([...m.atts].map((n) => [n, inline(id, n)]));
    }
    m.branch = { rev: doc._rev, revisions: doc._revisions, atts: new Set(Object.keys(doc._attachments || {})) };
    conflictDocs.push(doc);
    stats.conflicted++;
  }
  for (let j = 0; j < 60; j++) {
    const id = 'nef-' + String(j).padStart(3, '0');
    const h = (k) => md5hex(`${id}/${k}`);
    model.set(id, { revs: [], body: { type: 'nef', j }, atts: new Set(), nef: true });
    conflictDocs.push({ _id: id, _rev: `2-${h(2)}`, _revisions: { start: 2, ids: [h(2), h(1)] }, type: 'nef', j, side: 'a' });
    conflictDocs.push({ _id: id, _rev: `1-${h('b')}`, _revisions: { start: 1, ids: [h('b')] }, type: 'nef', j, side: 'b' });
    if (j % 3 === 0) {
      conflictDocs.push({ _id: id, _rev: `3-${h('c3')}`, _revisions: { start: 3, ids: [h('c3'), h('c2'), h(1)] }, _deleted: true });
    }
    if (j % 10 === 0) {
      conflictDocs.push({ _id: id, _rev: `2-${h('d2')}`, _revisions: { start: 2, ids: [h('d2'), h(1)] }, type: 'nef', j, side: 'd',
                          _attachments: { 'nef.bin': inline(id, 'nef.bin') } });
    }
    stats.nefDocs++;
  }
  await bulk(db, conflictDocs, false, 'conflict branches');

  // Phase 4: deletions. i % 25 == 7: plain deletes; i % 500 == 20: deletes of docs with
  // attachments; i % 200 == 3: delete the (conflicted) winner, so the other branch wins and the
  // deleted leaf is a deleted conflict; i % 300 == 53: delete every leaf of a conflicted doc.
  const dels = [];
  const winnerOf = async (id) => (await httpOk('GET', `${docPath(db, id)}?conflicts=true`));
  for (let i = 0; i < N_DOCS; i++) {
    const id = idOf(i);
    if (i % 25 === 7 || i % 500 === 20) {
      dels.push({ _id: id, _rev: current(id), _deleted: true });
      model.get(id).expectDeleted = i % 250 !== 7; // i % 250 == 7 is recreated below
      stats.deleted++;
    } else if (i % 200 === 3 || i % 300 === 53) {
      const doc = await winnerOf(id);
      dels.push({ _id: id, _rev: doc._rev, _deleted: true });
      if (i % 300 === 53) for (const c of doc._conflicts || []) dels.push({ _id: id, _rev: c, _deleted: true });
      model.get(id).expectDeleted = i % 300 === 53;
      stats.deleted++;
    }
  }
  await bulk(db, dels, true, 'deletions (all leaves of some conflicted docs in one request)');

  // Phase 5: some deleted docs are recreated (PUT without rev extends the tombstone's branch).
  const recreate = [];
  for (let i = 7; i < N_DOCS; i += 250) recreate.push({ _id: idOf(i), type: 'item', n: i, recreated: true });
  stats.recreated = recreate.length;
  await bulk(db, recreate, true, 'recreate deleted docs');

  // A _local document, which replication must not carry.
  await httpOk('PUT', `/${db}/_local/not-replicated`, { body: { secret: true } });
  return { ids: [...model.keys()] };
}

// ---------------------------------------------------------------------------------------------
// Snapshots and comparison of Chaise databases

// Everything replication must preserve, per document id.
async function snapshot(db) {
  const changes = await httpOk('GET', `/${db}/_changes?style=all_docs`, { timeoutMs: 60000 });
  const byId = new Map();
  const dupes = [];
  for (const row of changes.results) {
    if (byId.has(row.id)) dupes.push(row.id);
    byId.set(row.id, { seqDeleted: !!row.deleted, leaves: row.changes.map((c) => c.rev).sort() });
  }
  assert(dupes.length === 0, `${db}: _changes lists ids more than once: ${short(dupes.slice(0, 10))}`);
  const ids = [...byId.keys()].sort();

  // Winners, deleted flags, bodies, _conflicts and attachment stubs from _all_docs.
  for (let i = 0; i < ids.length; i += 1000) {
    const keys = ids.slice(i, i + 1000);
    const res = await httpOk('POST', `/${db}/_all_docs?include_docs=true&conflicts=true`, { body: { keys }, timeoutMs: 60000 });
    assertEq(res.rows.length, keys.length, `${db}: _all_docs rows for ${keys.length} keys`);
    for (const row of res.rows) {
      assert(!row.error, `${db}: _all_docs row for a key listed in _changes: ${short(row)}`);
      const e = byId.get(row.key);
      e.winner = row.value.rev;
      e.deleted = !!row.value.deleted;
      e.doc = row.doc;
    }
  }

  // Every leaf (with history and stubs) of docs with more than one leaf, plus deleted conflicts.
  const multi = ids.filter((id) => byId.get(id).leaves.length > 1);
  await pool(multi, 8, async (id) => {
    const e = byId.get(id);
    const open = await httpOk('GET', `${docPath(db, id)}?open_revs=all&revs=true`, { headers: { Accept: 'application/json' } });
    e.openRevs = open.map((x) => x.ok ?? x).sort((a, b) => (a._rev < b._rev ? -1 : 1));
    if (!e.deleted) {
      const d = await httpOk('GET', `${docPath(db, id)}?conflicts=true&deleted_conflicts=true`);
      e.conflicts = d._conflicts ?? [];
      e.deletedConflicts = d._deleted_conflicts ?? [];
    }
  });
  return { db, ids, byId, multi, changes };
}

// `revpos` of attachment stubs is left out when `ignoreRevpos`: a copy that went through a local
// PouchDB legitimately differs there (PouchDB stores an attachment that it received with a later
// revision under that revision's revpos, and pushes it so; CouchDB 3.5 then shows the same revpos 2
// where its source had 1).
function withoutRevpos(value) {
  if (Array.isArray(value)) return value.map(withoutRevpos);
  if (!value || typeof value !== 'object') return value;
  const out = {};
  for (const [k, v] of Object.entries(value)) {
    if (k === '_attachments' && v && typeof v === 'object') {
      out[k] = Object.fromEntries(Object.entries(v).map(([n, stub]) => [n, { ...stub, revpos: undefined }]));
    } else out[k] = withoutRevpos(v);
  }
  return out;
}
function diffSnapshots(a, b, { ignoreRevpos = false, limit = 12 } = {}) {
  const diffs = [];
  const push = (s) => { if (diffs.length < limit) diffs.push(s); else diffs.overflow = (diffs.overflow || 0) + 1; };
  const bIds = new Set(b.ids);
  for (const id of a.ids) if (!bIds.has(id)) push(`${id}: in ${a.db}, missing from ${b.db}`);
  const aIds = new Set(a.ids);
  for (const id of b.ids) if (!aIds.has(id)) push(`${id}: in ${b.db}, not in ${a.db}`);
  const norm = ignoreRevpos ? withoutRevpos : (v) => v;
  for (const id of a.ids) {
    if (!bIds.has(id)) continue;
    const x = a.byId.get(id), y = b.byId.get(id);
    for (const key of ['winner', 'deleted', 'seqDeleted', 'leaves', 'doc', 'openRevs', 'conflicts', 'deletedConflicts']) {
      if (!isDeepStrictEqual(norm(x[key]), norm(y[key]))) {
        push(`${id}: ${key} differs:\n  ${a.db}: ${short(x[key], Number(process.env.INTEROP_DIFF_CHARS || 700))}\n  ${b.db}: ${short(y[key], Number(process.env.INTEROP_DIFF_CHARS || 700))}`);
      }
    }
  }
  return diffs;
}
function assertSameSnapshots(a, b, opts) {
  const diffs = diffSnapshots(a, b, opts);
  if (diffs.length) {
    throw new CheckError(`${a.db} and ${b.db} differ (${diffs.length}${diffs.overflow ? '+' + diffs.overflow : ''} documents/fields):\n` + diffs.join('\n'));
  }
}

// The source must hold what seed() wrote (so that equality of two copies means something).
// Digests are only recomputed here for application/octet-stream: for compressible types such as
// text/plain, CouchDB's digest is the MD5 of the gzip-encoded data it stores, which a client cannot
// predict (the bytes themselves are checked by compareAttachmentBytes).
function checkSnapshotAgainstModel(s) {
  const problems = [];
  const p = (m) => { if (problems.length < 15) problems.push(m); else problems.more = (problems.more || 0) + 1; };
  let conflicted = 0, deleted = 0, withAtts = 0;
  if (s.ids.length !== model.size) p(`_changes lists ${s.ids.length} ids, ${model.size} were written`);
  for (const id of s.ids) {
    const e = s.byId.get(id);
    const m = model.get(id);
    if (!m) { p(`${id}: unexpected id`); continue; }
    if (e.deleted !== e.seqDeleted) p(`${id}: _all_docs says deleted=${e.deleted}, _changes says deleted=${e.seqDeleted}`);
    if (m.expectDeleted !== undefined && e.deleted !== m.expectDeleted) {
      p(`${id}: deleted=${e.deleted}, expected ${m.expectDeleted} (leaves ${short(e.leaves)})`);
    }
    // A branch written with new_edits=false whose oldest revision is already in the tree joins it:
    // its history (open_revs=all&revs=true) goes back to revision 1, like every other leaf's.
    for (const leaf of e.openRevs || []) {
      const hist = leaf._revisions;
      if (hist && hist.ids.length !== revPos(leaf._rev) && !(m.nef && leaf._rev.startsWith('1-'))) {
        const wrote = m.branch && m.branch.rev === leaf._rev ? ` (written with new_edits=false and _revisions ${short(m.branch.revisions)})` : '';
        p(`${id}: leaf ${leaf._rev} has a history of ${hist.ids.length} revisions, expected ${revPos(leaf._rev)}: ${short(hist)}${wrote}`);
      }
    }
    if (e.deleted) { deleted++; if (e.doc !== null) p(`${id}: deleted doc has include_docs doc ${short(e.doc)}`); continue; }
    if (!e.doc || e.doc._id !== id || e.doc._rev !== e.winner) { p(`${id}: _all_docs doc ${short(e.doc)} vs winner ${e.winner}`); continue; }
    if ((e.doc._conflicts || []).length) conflicted++;
    if (e.conflicts && !isDeepStrictEqual(e.conflicts, e.doc._conflicts || [])) {
      p(`${id}: GET ?conflicts=true says ${short(e.conflicts)}, _all_docs?conflicts=true says ${short(e.doc._conflicts)}`);
    }
    if (!m.nef && !m.branch && !id.startsWith('_design/') && !e.doc.recreated) {
      if (e.winner !== current(id)) p(`${id}: winner ${e.winner}, last written ${current(id)}`);
      const names = Object.keys(e.doc._attachments || {}).sort();
      if (!isDeepStrictEqual(names, [...m.atts].sort())) p(`${id}: attachments ${short(names)}, wrote ${short([...m.atts])}`);
    }
    for (const [name, stub] of Object.entries(e.doc._attachments || {})) {
      withAtts++;
      const bytes = attachmentBytes(id, name);
      const digestOk = contentType(name) === 'application/octet-stream' ? stub.digest === md5digest(bytes) : /^md5-[A-Za-z0-9+/]{22}==$/.test(stub.digest);
      const revposOk = m.branch || m.nef || stub.revpos === (name === 'added.txt' ? 2 : 1);
      if (!stub.stub || !digestOk || !revposOk || stub.length !== bytes.length || stub.content_type !== contentType(name)) {
        p(`${id}/${name}: stub ${short(stub)}; wrote ${bytes.length} bytes of ${contentType(name)}, md5 ${md5digest(bytes)}`);
      }
    }
  }
  if (conflicted < 50) p(`only ${conflicted} conflicted docs`);
  if (deleted < 150) p(`only ${deleted} deleted docs`);
  if (withAtts < 250) p(`only ${withAtts} attachments on winners`);
  if (problems.length) {
    throw new CheckError(`${s.db} does not hold what was written (${problems.length}${problems.more ? '+' + problems.more : ''} problems):\n` + problems.join('\n'));
  }
  return { ids: s.ids.length, conflicted, deleted, attachments: withAtts };
}

// Attachment bytes of every winning revision, from both dbs, against the bytes written.
async function compareAttachmentBytes(a, b) {
  const jobs = [];
  for (const id of a.ids) {
    const e = a.byId.get(id);
    if (e.deleted || !e.doc || !e.doc._attachments) continue;
    for (const name of Object.keys(e.doc._attachments)) jobs.push({ id, name, rev: e.winner });
  }
  // Also one attachment that only a losing leaf holds (branch.txt / nef.bin), via ?rev=.
  for (const id of a.multi) {
    for (const leaf of a.byId.get(id).openRevs) {
      if (leaf._rev === a.byId.get(id).winner || !leaf._attachments) continue;
      for (const name of Object.keys(leaf._attachments)) jobs.push({ id, name, rev: leaf._rev });
    }
  }
  const problems = [];
  let bytes = 0;
  await pool(jobs, 8, async ({ id, name, rev }) => {
    const expected = attachmentBytes(id, name);
    for (const s of [a, b]) {
      const url = `${docPath(s.db, id)}/${enc(name)}?rev=${enc(rev)}`;
      const r = await http('GET', url, { raw: true, headers: { Accept: '*/*' } });
      if (r.status !== 200) { problems.push(`GET ${url} -> ${r.status} ${r.body.toString('utf8', 0, 300)}`); continue; }
      if (!r.body.equals(expected)) problems.push(`GET ${url}: ${r.body.length} bytes, md5 ${md5digest(r.body)}; expected ${expected.length} bytes, ${md5digest(expected)}`);
      const ct = r.headers.get('content-type') || '';
      if (!ct.startsWith(contentType(name))) problems.push(`GET ${url}: Content-Type ${ct}, expected ${contentType(name)}`);
      bytes += r.body.length;
    }
  });
  if (problems.length) throw new CheckError(`${problems.length} attachment problems:\n` + problems.slice(0, 12).join('\n'));
  return { attachments: jobs.length, bytes };
}

// PouchDB's own winner/conflict computation must agree with Chaise's.
async function comparePouchWithSnapshot(local, s) {
  const res = await local.allDocs({ keys: s.ids, include_docs: true, conflicts: true });
  const problems = [];
  for (const row of res.rows) {
    const e = s.byId.get(row.key);
    if (row.error) { problems.push(`${row.key}: missing from PouchDB (${row.error})`); continue; }
    if (row.value.rev !== e.winner) problems.push(`${row.key}: PouchDB winner ${row.value.rev}, ${s.db} winner ${e.winner}`);
    if (!!row.value.deleted !== e.deleted) problems.push(`${row.key}: PouchDB deleted=${!!row.value.deleted}, ${s.db} deleted=${e.deleted}`);
    if (!e.deleted) {
      const pc = [...(row.doc._conflicts || [])].sort();
      const cc = [...(e.doc._conflicts || [])].sort();
      if (!isDeepStrictEqual(pc, cc)) problems.push(`${row.key}: PouchDB _conflicts ${short(pc)}, ${s.db} ${short(cc)}`);
    }
  }
  if (problems.length) throw new CheckError(`${problems.length} differences between PouchDB and ${s.db}:\n` + problems.slice(0, 12).join('\n'));
}

// ---------------------------------------------------------------------------------------------
// Replication helpers

function replicate(source, target, opts = {}) {
  return PouchDB.replicate(source, target, { batch_size: 100, ...opts });
}
function assertReplicationOk(result, what) {
  assert(result && result.ok !== false && (!result.errors || result.errors.length === 0) && !result.doc_write_failures,
         `${what}: ${short(result)}`);
}

// ---------------------------------------------------------------------------------------------
// Main

async function main() {
  const watchdog = setTimeout(() => {
    log(`watchdog: the run exceeded ${DEADLINE_S} s; stopping`);
    results.push({ name: 'whole run within deadline', ok: false, ms: DEADLINE_S * 1000, detail: 'watchdog fired' });
    finish(1);
  }, DEADLINE_S * 1000);

  const up = await check('chaise starts', 35000, async () => {
    await startServer();
    const info = await httpOk('GET', '/');
    assert(info.couchdb === 'Welcome', `GET / -> ${short(info)}`);
    return true;
  });
  if (!up) return finish(1, watchdog);

  const [SRC, DST, RESUME, LIVE, NANO] = ['src', 'dst', 'resume', 'live', 'nano'].map((n) => DB_PREFIX + n);
  createdDbs.push(SRC, DST, RESUME, LIVE, NANO);
  const seeded = await check(`seed ${N_DOCS} docs into ${SRC}`, 60000, async () => {
    const r = await seed(SRC);
    const info = await httpOk('GET', `/${SRC}`);
    log(`  ${SRC}: doc_count ${info.doc_count}, doc_del_count ${info.doc_del_count}; ${short(stats)}`);
    return r;
  });
  if (seeded) {
    await check('every _bulk_docs write of the seed succeeded (several leaves of one doc in one request included)', 1000, async () => {
      assert(bulkErrors.length === 0, `${bulkErrors.length} documents were refused:\n` + bulkErrors.slice(0, 8).join('\n'));
    });
  }

  let src, local;
  if (seeded) {
    src = await check(`read back ${SRC} (_changes, _all_docs, open_revs=all)`, 60000, () => snapshot(SRC));
    if (src) {
      await check(`${SRC} holds what was written (winners, histories, conflicts, deletions, attachment stubs)`, 10000, async () => {
        log(`  ${short(checkSnapshotAgainstModel(src))}`);
      });
    }

    local = new PouchDB('interop_local', { adapter: 'memory' });
    const pulled = await check(`PouchDB replicates ${SRC} -> local memory PouchDB`, 90000, async () => {
      const result = await replicate(rurl(SRC), local);
      assertReplicationOk(result, 'pull');
      log(`  pull: docs_read ${result.docs_read}, docs_written ${result.docs_written}, last_seq ${result.last_seq}`);
      const info = await local.info();
      const srcInfo = await httpOk('GET', `/${SRC}`);
      assertEq(info.doc_count, srcInfo.doc_count, 'local doc_count vs source doc_count');
      return result;
    });
    if (pulled && src) {
      await check('PouchDB agrees with the server on winners, deletions and _conflicts', 30000, () => comparePouchWithSnapshot(local, src));
    }

    const pushed = pulled && await check(`PouchDB replicates local -> new db ${DST}`, 90000, async () => {
      const result = await replicate(local, rurl(DST));
      assertReplicationOk(result, 'push');
      log(`  push: docs_read ${result.docs_read}, docs_written ${result.docs_written}`);
      return result;
    });
    if (pushed && src) {
      let dst;
      await check(`${SRC} and ${DST} are equal (ids, winners, leaves, histories, _conflicts, deletions, stubs)`, 60000, async () => {
        dst = await snapshot(DST);
        assertSameSnapshots(src, dst, { ignoreRevpos: true });
        const a = await httpOk('GET', `/${SRC}`), b = await httpOk('GET', `/${DST}`);
        assertEq([b.doc_count, b.doc_del_count], [a.doc_count, a.doc_del_count], 'doc_count, doc_del_count');
      });
      if (dst) {
        await check(`${SRC} and ${DST} hold the same attachment bytes`, 60000, async () => {
          const r = await compareAttachmentBytes(src, dst);
          log(`  ${r.attachments} attachments, ${(r.bytes / 2 ** 20).toFixed(1)} MiB compared`);
        });
      }
      await check(`_local docs are not replicated`, 10000, async () => {
        const r = await http('GET', `/${DST}/_local/not-replicated`);
        assertEq(r.status, 404, `GET /${DST}/_local/not-replicated status`);
      });
    }

    // Interrupted replication resumes from its checkpoint.
    if (src) {
      await check('a cancelled replication resumes from its checkpoint', 100000, async () => {
        const total = src.ids.length;
        const cancelAfter = Math.floor(total * 0.3);
        const rep = replicate(rurl(SRC), rurl(RESUME), { batch_size: 100, batches_limit: 2 });
        let cancelledAt = null;
        rep.on('change', (info) => {
          if (cancelledAt === null && info.docs_read >= cancelAfter) { cancelledAt = info.docs_read; rep.cancel(); }
        });
        const first = await withTimeout(rep, 60000, 'first (cancelled) replication');
        assert(cancelledAt !== null, `replication finished before it could be cancelled: ${short(first)}`);
        assertEq(first.status, 'cancelled', 'first run status');
        log(`  first run cancelled at docs_read ${cancelledAt}; result docs_read ${first.docs_read}, last_seq ${first.last_seq}`);

        // The checkpoint, as PouchDB wrote it on the target and the source.
        const locals = await httpOk('GET', `/${RESUME}/_local_docs?include_docs=true`);
        const cps = locals.rows.filter((row) => row.doc && row.doc.replicator === 'pouchdb');
        assertEq(cps.length, 1, `PouchDB checkpoints in /${RESUME}/_local_docs (${short(locals.rows)})`);
        const cpId = cps[0].id;
        const cpTarget = cps[0].doc;
        assert(cpTarget.last_seq && cpTarget.last_seq !== 0 && cpTarget.last_seq !== '0', `target checkpoint has no progress: ${short(cpTarget)}`);
        const cpSource = await httpOk('GET', `/${SRC}/${cpId}`);
        log(`  checkpoint ${cpId}: target last_seq ${cpTarget.last_seq}, source last_seq ${cpSource.last_seq}`);
        const after = await httpOk('GET', `/${SRC}/_changes?style=all_docs&since=${enc(cpTarget.last_seq)}`);
        const remaining = after.results.length;
        assert(remaining < total, `changes after checkpoint ${cpTarget.last_seq}: ${remaining} of ${total}`);

        const second = await withTimeout(replicate(rurl(SRC), rurl(RESUME)), 60000, 'second replication');
        assertReplicationOk(second, 'second run');
        log(`  second run: docs_read ${second.docs_read}, docs_written ${second.docs_written} (total ${total}, ${remaining} changes after the checkpoint)`);
        assert(second.docs_read < total, `second run read ${second.docs_read} docs of ${total}: it started over`);
        assert(second.docs_read <= remaining + 200, `second run read ${second.docs_read} docs, but only ${remaining} changes follow the checkpoint`);
        const cpAfter = await httpOk('GET', `/${RESUME}/${cpId}`);
        const cpSourceAfter = await httpOk('GET', `/${SRC}/${cpId}`);
        assertEq(cpAfter.last_seq, second.last_seq, 'target checkpoint last_seq after the second run');
        assertEq(cpSourceAfter.last_seq, second.last_seq, 'source checkpoint last_seq after the second run');
        const copy = await snapshot(RESUME);
        assertSameSnapshots(src, copy);
      });
    }
  }

  // Live sync both ways.
  await check('PouchDB.sync live carries changes both ways', 45000, async () => {
    await httpOk('PUT', `/${LIVE}`);
    await httpOk('PUT', `/${LIVE}/seed`, { body: { v: 0 } });
    const mine = new PouchDB('interop_live_local', { adapter: 'memory' });
    const errors = [];
    const sync = PouchDB.sync(mine, rurl(LIVE), { live: true, retry: false, heartbeat: 5000 });
    sync.on('error', (err) => errors.push(err));
    const done = new Promise((resolve) => sync.on('complete', resolve));
    try {
      await waitFor('the initial doc to reach PouchDB', 15000, () => mine.get('seed').catch(() => null));
      // Chaise -> local
      const put = await httpOk('PUT', `/${LIVE}/from-chaise`, { body: { side: 'chaise' } });
      await waitFor('a doc written on Chaise to reach PouchDB', 15000, () => mine.get('from-chaise').catch(() => null));
      // local -> Chaise
      const lput = await mine.put({ _id: 'from-local', side: 'pouch' });
      await waitFor('a doc written in PouchDB to reach Chaise', 15000, async () => (await http('GET', `/${LIVE}/from-local`)).status === 200);
      // an update on Chaise and a deletion in PouchDB
      const upd = await httpOk('PUT', `/${LIVE}/from-chaise`, { body: { _rev: put.rev, side: 'chaise', v: 2 } });
      await waitFor('an update on Chaise to reach PouchDB', 15000, async () => (await mine.get('from-chaise'))._rev === upd.rev);
      await mine.remove('from-local', lput.rev);
      await waitFor('a deletion in PouchDB to reach Chaise', 15000, async () => {
        const r = await http('GET', `/${LIVE}/from-local`);
        return r.status === 404 && r.body && r.body.reason === 'deleted';
      });
      assert(errors.length === 0, `sync errors: ${errors.map(String).join('; ')}`);
    } finally {
      sync.cancel();
      await withTimeout(done, 10000, 'live sync to complete after cancel').catch((e) => errors.push(e));
    }
    assert(errors.length === 0, `sync errors: ${errors.map((e) => e.stack || String(e)).join('; ')}`);
  });

  // nano.
  await check('nano common calls', 30000, async () => {
    const nano = Nano({ url: credBase });
    const name = NANO;
    const created = await nano.db.create(name);
    assert(created.ok === true, `db.create -> ${short(created)}`);
    const info = await nano.db.get(name);
    assertEq([info.db_name, info.doc_count], [name, 0], 'db.get (info)');
    const all = await nano.db.list();
    assert(all.includes(name), `db.list -> ${short(all)}`);
    const db = nano.use(name);
    const ins = await db.insert({ hello: 'world', n: 1 }, 'doc1');
    assert(ins.ok && ins.id === 'doc1' && /^1-/.test(ins.rev), `insert -> ${short(ins)}`);
    const got = await db.get('doc1');
    assertEq([got._id, got._rev, got.hello], ['doc1', ins.rev, 'world'], 'get');
    const head = await db.head('doc1');
    assertEq(head.etag, `"${ins.rev}"`, 'head etag');
    const b = await db.bulk({ docs: [{ _id: 'b1', v: 1 }, { _id: 'b2', v: 2 }, { _id: 'doc1', _rev: ins.rev, hello: 'again' }] });
    assert(b.length === 3 && b.every((r) => r.ok), `bulk -> ${short(b)}`);
    const list = await db.list({ include_docs: true });
    assertEq(list.rows.map((r) => r.id), ['b1', 'b2', 'doc1'], 'list ids');
    assertEq(list.rows.map((r) => r.doc.v ?? r.doc.hello), [1, 2, 'again'], 'list include_docs bodies');
    const fetched = await db.fetch({ keys: ['b2', 'doc1', 'nope'] });
    assertEq(fetched.rows.map((r) => (r.doc ? r.doc._id : r.error)), ['b2', 'doc1', 'not_found'], 'fetch');
    const bin = Buffer.from(Array.from({ length: 4096 }, (_, i) => (i * 7) & 255));
    const doc1Rev = b.find((r) => r.id === 'doc1').rev;
    const att = await db.attachment.insert('doc1', 'pic.bin', bin, 'application/octet-stream', { rev: doc1Rev });
    assert(att.ok && /^3-/.test(att.rev), `attachment.insert -> ${short(att)}`);
    const back = await db.attachment.get('doc1', 'pic.bin');
    assert(Buffer.isBuffer(back) && back.equals(bin), `attachment.get returned ${back && back.length} bytes`);
    const withStub = await db.get('doc1');
    assertEq(withStub._attachments['pic.bin'].digest, md5digest(bin), 'attachment digest');
    const ch = await db.changes({ since: 0, include_docs: true });
    assertEq(ch.results.map((r) => r.id).sort(), ['b1', 'b2', 'doc1'], 'changes ids');
    assert(ch.last_seq, `changes last_seq ${short(ch)}`);
    const destroyed = await nano.db.destroy(name);
    assert(destroyed.ok === true, `db.destroy -> ${short(destroyed)}`);
    const gone = await nano.db.get(name).then(() => null, (err) => err.statusCode);
    assertEq(gone, 404, 'db.get after destroy');
  });

  return finish(0, watchdog);
}

let finishing = false;
async function finish(forced, watchdog) {
  if (finishing) return;
  finishing = true;
  if (watchdog) clearTimeout(watchdog);
  if (EXTERNAL) {
    for (const db of createdDbs) await http('DELETE', `/${db}`, { timeoutMs: 10000 }).catch(() => {});
  }
  const status = await stopServer();
  if (status) {
    const ok = status.code === 0 || (status.code === null && status.signal === 'SIGTERM');
    results.push({ name: 'chaise stops on SIGTERM', ok: status.code === 0, ms: 0,
                   detail: `exit code ${status.code}, signal ${status.signal}` });
    log(`${ok && status.code === 0 ? 'ok    ' : 'FAILED'} chaise stops on SIGTERM (exit code ${status.code}, signal ${status.signal})`);
  }
  const failed = results.filter((r) => !r.ok);
  console.log('\nSummary:');
  for (const r of results) console.log(`  ${r.ok ? 'PASS' : 'FAIL'}  ${r.name}  (${r.ms} ms)`);
  if (failed.length) {
    console.log(`\nchaise log (last lines, ${serverLog}):\n${logTail(30)}`);
  }
  console.log(`total ${elapsed()}`);
  console.log(`interop: ${results.length - failed.length} passed, ${failed.length} failed`);
  process.exit(failed.length || forced ? 1 : 0);
}

main().catch((err) => {
  results.push({ name: 'harness', ok: false, ms: 0, detail: err.stack || String(err) });
  log(`harness error: ${err.stack || err}`);
  finish(1);
});
