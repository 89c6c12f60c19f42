// Browser interoperability: Debian's Chromium (headless, driven by playwright-core) against a real
// Chaise.
//
// 1. CORS: a page served from another origin loads PouchDB's browser build and syncs a local
//    (IndexedDB) database with Chaise both ways, authenticating with Basic; Chaise must answer the
//    preflights and carry the CORS headers, or the browser refuses every response.
// 2. Fauxton at /_utils: log in through its form, see the database list, open a document, create
//    a database and a document.
// 3. Fauxton's Replication page: start a one-shot replication from a local database into a new one;
//    Chaise's replicator runs the job the page writes into _replicator.
//
// Run through run_browser_test.sh (CTest does). CHROMIUM=/path overrides /usr/bin/chromium; without
// it the test exits 77, which CTest reports as a skip.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import http from 'node:http';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const HERE = path.dirname(fileURLToPath(import.meta.url));
const BINARY = process.env.CHAISE_BINARY || path.join(HERE, '../../build/server/chaise');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const FAUXTON = path.join(HERE, '../../ui/node_modules/pouchdb-fauxton/www');
const ADMIN = 'browser_admin';
const PASSWORD = 'browser-secret';

let failures = 0;
let passes = 0;
function check(cond, what) {
  if (cond) { passes++; console.log(`ok   ${what}`); } else { failures++; console.log(`FAIL ${what}`); }
}
function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([
    promise,
    new Promise((_, reject) => { timer = setTimeout(() => reject(new Error(`timeout: ${what}`)), ms); }),
  ]).finally(() => clearTimeout(timer));
}

// The page's server: another origin (another port) than Chaise's.
function startPageServer() {
  const pouch = fs.readFileSync(path.join(HERE, 'node_modules/pouchdb/dist/pouchdb.min.js'));
  const page = '<!doctype html><meta charset="utf-8"><title>sync</title><script src="/pouchdb.min.js"></script>';
  const server = http.createServer((req, res) => {
    if (req.url === '/pouchdb.min.js') { res.writeHead(200, { 'Content-Type': 'application/javascript' }); res.end(pouch); return; }
    if (req.url === '/') { res.writeHead(200, { 'Content-Type': 'text/html' }); res.end(page); return; }
    res.writeHead(404); res.end();
  });
  return new Promise((resolve) => server.listen(0, '127.0.0.1', () => resolve(server)));
}

async function startChaise(tmp, pageOrigin) {
  const ini = path.join(tmp, 'local.ini');
  fs.writeFileSync(ini, [
    '[chttpd_auth]', 'iterations = 10',
    '[chttpd]', 'enable_cors = true',
    '[cors]', `origins = ${pageOrigin}`, 'credentials = true',
    '[chaise]', `fauxton_dir = ${FAUXTON}`,
    '',
  ].join('\n'));
  const proc = spawn(BINARY, ['--port', '0', '--data-dir', path.join(tmp, 'data'), '--config', ini],
    { stdio: ['ignore', 'pipe', 'ignore'], env: { ...process.env, COUCHDB_USER: ADMIN, COUCHDB_PASSWORD: PASSWORD } });
  const port = await withTimeout(new Promise((resolve, reject) => {
    let buffered = '';
    proc.stdout.setEncoding('utf8');
    proc.stdout.on('data', (chunk) => {
      buffered += chunk;
      const m = /chaise listening on \S+:(\d+)\r?\n/.exec(buffered);
      if (m) resolve(Number(m[1]));
    });
    proc.on('exit', (code) => reject(new Error(`chaise exited (${code}) before listening`)));
  }), 30000, 'chaise to listen');
  proc.stdout.resume();
  return { proc, port };
}

async function api(base, method, urlPath, body) {
  const headers = { Authorization: 'Basic ' + Buffer.from(`${ADMIN}:${PASSWORD}`).toString('base64'), Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  const res = await fetch(base + urlPath, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  return { status: res.status, json: await res.json().catch(() => null) };
}

async function corsSync(browser, base, pageUrl) {
  await api(base, 'PUT', '/browserdb');
  await api(base, 'PUT', '/browserdb/from-server', { side: 'server' });
  const page = await browser.newPage();
  const consoleLines = [];
  page.on('console', (m) => consoleLines.push(m.text()));
  await page.goto(pageUrl);
  const result = await withTimeout(page.evaluate(async ({ remoteUrl, user, password }) => {
    /* global PouchDB */
    const local = new PouchDB('local_' + Date.now());
    const remote = new PouchDB(remoteUrl, { auth: { username: user, password }, skip_setup: true });
    for (let i = 0; i < 20; i++) await local.put({ _id: `from-browser-${i}`, i });
    const sync = await local.sync(remote);
    const info = await remote.info();
    const pulled = await local.get('from-server');
    return { pushed: sync.push.docs_written, pulled: sync.pull.docs_written, remoteCount: info.doc_count, side: pulled.side };
  }, { remoteUrl: `${base}/browserdb`, user: ADMIN, password: PASSWORD }), 60000, 'browser sync');
  check(result.pushed === 20, `browser pushed 20 docs through CORS (got ${result.pushed})`);
  check(result.pulled === 1, `browser pulled the server's doc (got ${result.pulled})`);
  check(result.remoteCount === 21 && result.side === 'server', 'both sides hold all 21 docs');
  const doc = await api(base, 'GET', '/browserdb/from-browser-7');
  check(doc.status === 200 && doc.json.i === 7, 'a browser-written doc reads back from Chaise');
  await page.close();
  // A page on an origin [cors] origins does not list gets nothing: the browser refuses.
  const stranger = await startPageServer();
  const other = await browser.newPage();
  await other.goto(`http://127.0.0.1:${stranger.address().port}/`);
  const refused = await withTimeout(other.evaluate(async ({ remoteUrl, user, password }) => {
    const remote = new PouchDB(remoteUrl, { auth: { username: user, password }, skip_setup: true });
    try { await remote.info(); return false; } catch (e) { return true; }
  }, { remoteUrl: `${base}/browserdb`, user: ADMIN, password: PASSWORD }), 30000, 'stranger origin');
  check(refused, 'a page on an origin not in [cors] origins cannot read Chaise');
  await other.close();
  stranger.close();
  if (failures) console.log(consoleLines.slice(-10).join('\n'));
}

// Logs the page into Fauxton through its form (Fauxton shows it when /_session says nobody is
// logged in), and waits for its POST /_session. Each browser.newPage() has its own cookies, so
// each page logs in.
async function fauxtonLogin(page, base) {
  await page.goto(`${base}/_utils/`);
  await page.waitForSelector('#username', { timeout: 30000 });
  await page.fill('#username', ADMIN);
  await page.fill('#password', PASSWORD);
  const session = page.waitForResponse((r) => r.url() === `${base}/_session` && r.request().method() === 'POST',
    { timeout: 30000 });
  await page.click('#submit');
  await session;
}

async function fauxton(browser, base) {
  await api(base, 'PUT', '/fauxtondb');
  await api(base, 'PUT', '/fauxtondb/doc-one', { hello: 'fauxton' });
  const page = await browser.newPage();
  await fauxtonLogin(page, base);
  // The database list, after login.
  await page.goto(`${base}/_utils/#/_all_dbs`);
  await page.waitForSelector('text=fauxtondb', { timeout: 30000 });
  check(true, 'Fauxton lists the databases after logging in');
  // A document.
  await page.goto(`${base}/_utils/#/database/fauxtondb/doc-one`);
  await page.waitForSelector('text=fauxton', { timeout: 30000 });
  const text = await page.content();
  check(text.includes('doc-one'), 'Fauxton opens a document');
  // Create a database with Fauxton's own button and tray; it then shows the new, empty database.
  await page.goto(`${base}/_utils/#/_all_dbs`);
  await page.click('button.add-new-database-btn', { timeout: 30000 });
  await page.fill('#js-new-database-name', 'uidb');
  await page.click('#js-create-database');
  await page.waitForURL(/#\/?database\/uidb\/_all_docs/, { timeout: 30000 });
  const db = await api(base, 'GET', '/uidb');
  check(db.status === 200 && db.json.doc_count === 0, `Fauxton's Create Database button creates it (${db.status})`);
  // Create a document in Fauxton's editor (Ace) and its Create Document button.
  await page.goto(`${base}/_utils/#/database/uidb/new`);
  await page.waitForSelector('button.save-doc', { timeout: 30000 });
  await page.click('.ace_content');
  await page.keyboard.press('Control+A');
  await page.keyboard.insertText('{"_id": "made-in-ui", "x": 1}');
  await page.click('button.save-doc');
  await page.waitForURL(/#\/database\/uidb\/_all_docs/, { timeout: 30000 });
  const doc = await api(base, 'GET', '/uidb/made-in-ui');
  check(doc.status === 200 && doc.json.x === 1 && /^1-/.test(doc.json._rev),
    `Fauxton's editor creates a document (${doc.status} ${JSON.stringify(doc.json)})`);
  await page.close();
}

// Fauxton's Replication page. This Fauxton POSTs a document to /_replicator (source and target as
// URLs on the page's origin, each with a Basic Authorization header built from the password its
// modal asks for, create_target for a new database) and lists replications from _replicator's
// documents and their _replication_state; the page calls neither /_replicate nor /_scheduler.
async function fauxtonReplication(browser, base) {
  // CouchDB 3 has _replicator only on a set-up node ([couchdb] single_node); the test's is not.
  const replicatorDb = await api(base, 'PUT', '/_replicator');
  check(replicatorDb.status === 201, `PUT /_replicator creates the replicator database (${replicatorDb.status})`);
  await api(base, 'PUT', '/repsrc');
  for (let i = 1; i <= 3; i++) await api(base, 'PUT', `/repsrc/doc-${i}`, { i });
  const page = await browser.newPage();
  await fauxtonLogin(page, base);
  // Fauxton moves to the database list once logged in; going elsewhere before it has would be
  // undone by that move.
  await page.goto(`${base}/_utils/#/_all_dbs`);
  await page.waitForSelector('text=repsrc', { timeout: 30000 });
  // The form: local source (a searchable select filled from /_all_dbs), new local target, one time.
  await page.goto(`${base}/_utils/#/replication/_create`);
  await page.waitForSelector('select#replication-source', { timeout: 30000 });
  await page.selectOption('select#replication-source', 'REPLICATION_SOURCE_LOCAL');
  await page.click('.replication__input-react-select .Select-control');
  await page.keyboard.type('repsrc');
  await page.click('.Select-option:has-text("repsrc")', { timeout: 30000 });
  // The target and type selects share the id replication-target; the target's sits in a div of
  // that id.
  await page.selectOption('div#replication-target select', 'REPLICATION_TARGET_NEW_LOCAL_DATABASE');
  await page.fill('input.replication__new-input', 'reptgt');
  await page.selectOption('select:has(option[value="REPLICATION_TYPE_ONE_TIME"])', 'REPLICATION_TYPE_ONE_TIME');
  await page.click('button#replicate');
  // Start Replication asks for the account's password (checked with POST /_session), then writes
  // the replication document.
  await page.fill('.enter-password-modal input.password-modal-input', PASSWORD, { timeout: 30000 });
  const posted = page.waitForResponse((r) => r.url() === `${base}/_replicator` && r.request().method() === 'POST',
    { timeout: 30000 });
  await page.click('.enter-password-modal button.btn-success');
  const response = await posted;
  const sent = response.request().postDataJSON();
  const created = await response.json().catch(() => null);
  check(response.status() === 201 && created && created.ok && typeof created.id === 'string',
    `Fauxton's Start Replication writes a _replicator document (${response.status()} ${JSON.stringify(created)})`);
  const shown = JSON.stringify({ ...sent, source: sent.source.url, target: sent.target.url });
  check(sent.source.url === `${base}/repsrc` && sent.target.url === `${base}/reptgt` &&
    sent.create_target === true && sent.continuous === false && /^Basic /.test(sent.source.headers.Authorization),
    `the document names local repsrc and a new local reptgt, one time, with Basic auth (${shown})`);
  // The job: Chaise's replicator creates reptgt, copies the 3 documents and completes the job.
  let target = null;
  let schedulerDoc = null;
  const deadline = Date.now() + 30000;
  while (Date.now() < deadline) {
    target = await api(base, 'GET', '/reptgt/_all_docs');
    const docs = await api(base, 'GET', '/_scheduler/docs');
    schedulerDoc = docs.status === 200 ? docs.json.docs.find((d) => d.doc_id === created.id) : null;
    const copiedAll = target.status === 200 && target.json.rows.length === 3;
    if (copiedAll && schedulerDoc && schedulerDoc.state === 'completed') break;
    await new Promise((resolve) => setTimeout(resolve, 500));
  }
  check(target.status === 200 && target.json.rows.map((r) => r.id).join() === 'doc-1,doc-2,doc-3',
    `the replication copies the 3 documents into reptgt (${target.status} ${JSON.stringify(target.json)})`);
  const copied = await api(base, 'GET', '/reptgt/doc-2');
  check(copied.status === 200 && copied.json.i === 2, `a copied document reads back from reptgt (${copied.status})`);
  check(schedulerDoc && schedulerDoc.state === 'completed' && schedulerDoc.info.docs_written === 3,
    `GET /_scheduler/docs shows the job completed (${JSON.stringify(schedulerDoc)})`);
  const doc = await api(base, 'GET', `/_replicator/${created.id}`);
  const state = doc.json && doc.json._replication_state;
  check(doc.status === 200 && state === 'completed',
    `the _replicator document records _replication_state completed (${doc.status} ${state})`);
  // Fauxton's list of replications, read from _replicator, shows it completed.
  await page.goto(`${base}/_utils/#/replication`);
  const row = await page.waitForSelector('tr.replication__table-row:has(a[href="#/database/reptgt/_all_docs"])',
    { timeout: 30000 });
  const status = await row.$eval('.replication__row-status', (el) => el.textContent);
  check(status === 'completed', `Fauxton lists the replication as completed (${status})`);
  await page.close();
}

async function main() {
  if (!fs.existsSync(CHROMIUM)) {
    console.log(`skipped: no Chromium at ${CHROMIUM}`);
    return 77;
  }
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'chaise-browser-'));
  const pageServer = await startPageServer();
  const pageOrigin = `http://127.0.0.1:${pageServer.address().port}`;
  const { proc, port } = await startChaise(tmp, pageOrigin);
  const base = `http://127.0.0.1:${port}`;
  const browser = await chromium.launch({ executablePath: CHROMIUM, args: ['--no-sandbox', '--headless=new'] });
  try {
    await corsSync(browser, base, pageOrigin + '/');
    await fauxton(browser, base);
    await fauxtonReplication(browser, base);
  } catch (e) {
    failures++;
    console.log(`FAIL ${e.stack || e}`);
  } finally {
    await browser.close();
    pageServer.close();
    proc.kill('SIGTERM');
    fs.rmSync(tmp, { recursive: true, force: true });
  }
  console.log(`browser: ${passes} passed, ${failures} failed`);
  return failures ? 1 : 0;
}

process.exit(await main());
