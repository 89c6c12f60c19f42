// Browser interoperability: Debian's Chromium (headless, driven by playwright-core) against a real
// Chaise.
//
// 1. CORS: a page served from another origin loads PouchDB's browser build and syncs a local
//    (IndexedDB) database with Chaise both ways, authenticating with Basic; Chaise must answer the
//    preflights and carry the CORS headers, or the browser refuses every response.
// 2. Fauxton at /_utils: log in through its form, see the database list, open a document, create
//    a database and a document.
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

async function fauxton(browser, base) {
  await api(base, 'PUT', '/fauxtondb');
  await api(base, 'PUT', '/fauxtondb/doc-one', { hello: 'fauxton' });
  const page = await browser.newPage();
  await page.goto(`${base}/_utils/`);
  // The login form (Fauxton shows it when /_session says nobody is logged in).
  await page.waitForSelector('#username', { timeout: 30000 });
  await page.fill('#username', ADMIN);
  await page.fill('#password', PASSWORD);
  await page.click('#submit');
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
