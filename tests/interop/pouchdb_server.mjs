#!/usr/bin/env node
// pouchdb-server as `pouchdb-server --in-memory` runs it (its express-pouchdb app over PouchDB
// with the in-memory adapter, the modules resolved from pouchdb-server's own package), listening
// on 127.0.0.1 with an OS-assigned port, which it prints as "listening on <port>". Its config
// and log files go to the directory given as the first argument. Stopped by its pid.
import { createRequire } from 'node:module';
import path from 'node:path';

const dir = process.argv[2];
if (!dir) {
  console.error('usage: node pouchdb_server.mjs <work dir>');
  process.exit(2);
}
const here = createRequire(import.meta.url);
const req = createRequire(here.resolve('pouchdb-server/lib/index.js'));
const express = req('express');
const PouchDB = req('pouchdb-core')
  .plugin(req('pouchdb-adapter-http'))
  .plugin(req('pouchdb-replication'))
  .plugin(req('pouchdb-mapreduce'))
  .plugin(req('pouchdb-adapter-memory'));
const app = express();
app.use(req('express-pouchdb')(PouchDB.defaults({ prefix: dir + path.sep }), {
  configPath: path.join(dir, 'config.json'),
  logPath: path.join(dir, 'log.txt'),
}));
const server = app.listen(0, '127.0.0.1', () => {
  console.log('listening on ' + server.address().port);
});
