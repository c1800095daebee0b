// The count for target.toml's [mcp.count]: the tasks in DIR/tasks.json, 0 before the server has
// made the file. The server rewrites the whole file on every change (truncate, then write), so a
// read can catch it half-written: such a read is retried, every 20 ms for at most 2 s. A file still
// torn after that is said in one line on standard error (which the check shows) and exits 1.
//
// Usage: node count.js DIR
'use strict';
const fs = require('fs');
const file = `${process.argv[2]}/tasks.json`;
const pause = new Int32Array(new SharedArrayBuffer(4));
for (let attempt = 1; ; attempt += 1) {
  try {
    console.log(fs.existsSync(file) ? JSON.parse(fs.readFileSync(file, 'utf8')).tasks.length : 0);
    break;
  } catch (error) {
    if (attempt >= 100) {
      // Still not JSON after 2 s: no write is under way any more, the file stays torn (two
      // overlapping rewrites can leave the tail of a longer one behind a shorter one).
      console.error(`count.js: ${file} is still not JSON after 2 s: ${error.message}`);
      process.exit(1);
    }
    Atomics.wait(pause, 0, 0, 20);
  }
}
