// A ticket service on Express behind express-idempotency, set up as its README says.
//
// Usage: node service.js [PORT]   (PORT 0 or absent: any free port; the address is printed)
//
// Callers are bearer tokens (alice-token, bob-token); tickets are kept in memory; POST /comments
// is a second keyed endpoint, for the check's "same key on another endpoint" point. As the README
// asks, the handler returns early on a "hit" and reports its own handled errors with reportError.
// Fault triggers in the body:
//   title "", or a priority containing "invalid"  -> 422 validation error (nothing created)
//   a priority containing "flaky"   -> 503 the first time a title and priority are seen, then
//                                      success (a downstream blip)
//   a priority containing "crash"   -> the handler throws (Express answers 500)
//   a priority containing "after-effect" -> the handler throws after the ticket is saved (a
//                                      fault between the effect and the middleware's record)
//   a priority containing "record-lost" -> the ticket is saved and answered 201, and then the
//                                      middleware's store fails to save the key's record (the
//                                      package saves it after the answer has gone out, and on
//                                      a failure deletes the key)
'use strict';
const express = require('express');
const { idempotency, getSharedIdempotencyService } = require('express-idempotency');
const { InMemoryDataAdapter } = require('express-idempotency/dist/defaults/inMemoryDataAdapter');

// The package's default store, with the one test hook above: a store that is down when the
// record of a "record-lost" answer is saved.
class HookedStore extends InMemoryDataAdapter {
  async update(resource) {
    if (String((resource.response || {}).body || '').includes('record-lost')) {
      throw new Error('the store is down: the record is not saved');
    }
    return super.update(resource);
  }
}

const callers = { 'Bearer alice-token': 'alice', 'Bearer bob-token': 'bob' };
const tickets = [];
const flakySeen = new Set();

const app = express();
// Production mode: error pages without stack traces, as a deployed service answers.
app.set('env', 'production');
app.use(express.json());
app.use((req, res, next) => {
  req.caller = callers[req.get('authorization') || ''];
  if (!req.caller) return res.status(401).json({ error: 'unknown caller' });
  next();
});
app.post('*', idempotency({ dataAdapter: new HookedStore() }));

app.post('/tickets', (req, res) => {
  const service = getSharedIdempotencyService();
  if (service.isHit(req)) return;
  const { title, priority = 'normal' } = req.body || {};
  if (typeof title !== 'string' || title.trim() === '' || String(priority).includes('invalid')) {
    service.reportError(req);
    return res.status(422).json({ error: 'a non-empty title and a known priority, please' });
  }
  const seen = JSON.stringify([title, priority]);
  if (String(priority).includes('flaky') && !flakySeen.has(seen)) {
    flakySeen.add(seen);
    service.reportError(req);
    return res.status(503).json({ error: 'ticket backend briefly unavailable' });
  }
  if (String(priority).includes('crash')) throw new Error('handler failed before creating the ticket');
  const ticket = { ticket_id: tickets.length + 1, owner: req.caller, title, priority };
  tickets.push(ticket);
  if (String(priority).includes('after-effect')) throw new Error(`handler failed after saving ticket ${ticket.ticket_id}`);
  res.status(201).json(ticket);
});

const comments = [];
app.post('/comments', (req, res) => {
  if (getSharedIdempotencyService().isHit(req)) return;
  const comment = { comment_id: comments.length + 1, owner: req.caller, text: (req.body || {}).text };
  comments.push(comment);
  res.status(201).json(comment);
});

app.get('/tickets', (req, res) => {
  res.json({ tickets: tickets.filter((t) => t.owner === req.caller) });
});

const server = app.listen(Number(process.argv[2] || 0), '127.0.0.1', () => {
  console.log(`listening on http://127.0.0.1:${server.address().port}`);
  // The package logs its store's failures with console.log; a caller may stop reading standard
  // output after the first line, so they go to standard error, the service's log.
  console.log = console.error;
});
