// A ticket service on Express behind duplicate-requests, set up as its README says: one
// middleware for every POST, its store in memory (no connectionUri), its default expiration and
// error answer, and the request's id read by the documented `property` function, here the
// Idempotency-Key header (the README's example reads a query parameter).
//
// Usage: node service.js [PORT]   (PORT 0 or absent: any free port; the address is printed)
//
// Callers are bearer tokens (alice-token, bob-token); tickets are kept in memory; POST /comments
// is a second keyed endpoint, for the check's "same key on another endpoint" point.
// Fault triggers in the body:
//   title "", or a priority containing "invalid"  -> 422 validation error (nothing created)
//   a priority containing "flaky"   -> 503 the first time a title and priority are seen, then
//                                      success (a downstream blip)
//   a priority containing "crash"   -> the handler throws (Express answers 500)
//   a priority containing "after-effect" -> the handler throws after the ticket is saved (a
//                                      fault between the effect and the middleware's record)
'use strict';
const express = require('express');
const duplicate = require('duplicate-requests').default;

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
app.post('*', duplicate({ property: (req) => req.get('Idempotency-Key') }));

app.post('/tickets', (req, res) => {
  const { title, priority = 'normal' } = req.body || {};
  if (typeof title !== 'string' || title.trim() === '' || String(priority).includes('invalid')) {
    return res.status(422).json({ error: 'a non-empty title and a known priority, please' });
  }
  const seen = JSON.stringify([title, priority]);
  if (String(priority).includes('flaky') && !flakySeen.has(seen)) {
    flakySeen.add(seen);
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
  const comment = { comment_id: comments.length + 1, owner: req.caller, text: (req.body || {}).text };
  comments.push(comment);
  res.status(201).json(comment);
});

app.get('/tickets', (req, res) => {
  res.json({ tickets: tickets.filter((t) => t.owner === req.caller) });
});

const server = app.listen(Number(process.argv[2] || 0), '127.0.0.1', () => {
  console.log(`listening on http://127.0.0.1:${server.address().port}`);
});
