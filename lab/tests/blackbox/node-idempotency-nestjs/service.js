// A ticket service on NestJS behind @node-idempotency/nestjs, set up as its README says (the
// module registered with the memory adapter, the handler decorated with @Idempotent()).
//
// Usage: node service.js [PORT]   (PORT 0 or absent: any free port; the address is printed)
//
// Plain JavaScript, so the decorators TypeScript would compile are applied by hand with
// Reflect.decorate, exactly as tsc emits them. Callers are bearer tokens (alice-token,
// bob-token); tickets are kept in memory; POST /comments is a second keyed endpoint, for the
// check's "same key on another endpoint" point. Fault triggers in the body:
//   title "", or a priority containing "invalid"  -> 422 validation error (nothing created)
//   a priority containing "flaky"   -> 503 the first time a title and priority are seen, then
//                                      success (a downstream blip)
//   a priority containing "crash"   -> the handler throws (NestJS answers 500)
//   a priority containing "after-effect" -> the handler throws after the ticket is saved (a
//                                      fault between the effect and the middleware's record)
'use strict';
require('reflect-metadata');
const { Body, Controller, Get, Headers, HttpCode, HttpException, Module, Post } = require('@nestjs/common');
const { NestFactory } = require('@nestjs/core');
const { Idempotent, NodeIdempotencyModule } = require('@node-idempotency/nestjs');

const callers = { 'Bearer alice-token': 'alice', 'Bearer bob-token': 'bob' };
const tickets = [];
const comments = [];
const flakySeen = new Set();

function callerOf(authorization) {
  const caller = callers[authorization || ''];
  if (!caller) throw new HttpException({ error: 'unknown caller' }, 401);
  return caller;
}

class TicketsController {
  create(body, authorization) {
    const owner = callerOf(authorization);
    const { title, priority = 'normal' } = body || {};
    if (typeof title !== 'string' || title.trim() === '' || String(priority).includes('invalid')) {
      throw new HttpException({ error: 'a non-empty title and a known priority, please' }, 422);
    }
    const seen = JSON.stringify([title, priority]);
    if (String(priority).includes('flaky') && !flakySeen.has(seen)) {
      flakySeen.add(seen);
      throw new HttpException({ error: 'ticket backend briefly unavailable' }, 503);
    }
    if (String(priority).includes('crash')) throw new Error('handler failed before creating the ticket');
    const ticket = { ticket_id: tickets.length + 1, owner, title, priority };
    tickets.push(ticket);
    if (String(priority).includes('after-effect')) throw new Error(`handler failed after saving ticket ${ticket.ticket_id}`);
    return ticket;
  }

  comment(body, authorization) {
    const owner = callerOf(authorization);
    const comment = { comment_id: comments.length + 1, owner, text: (body || {}).text };
    comments.push(comment);
    return comment;
  }

  list(authorization) {
    const owner = callerOf(authorization);
    return { tickets: tickets.filter((t) => t.owner === owner) };
  }
}
const param = (index, decorator) => (target, key) => decorator(target, key, index);
const method = (name) => Object.getOwnPropertyDescriptor(TicketsController.prototype, name);
Reflect.decorate(
  [Post('/tickets'), HttpCode(201), Idempotent(), param(0, Body()), param(1, Headers('authorization'))],
  TicketsController.prototype, 'create', method('create'));
Reflect.decorate(
  [Post('/comments'), HttpCode(201), Idempotent(), param(0, Body()), param(1, Headers('authorization'))],
  TicketsController.prototype, 'comment', method('comment'));
Reflect.decorate([Get('/tickets'), param(0, Headers('authorization'))], TicketsController.prototype, 'list', method('list'));
Reflect.decorate([Controller()], TicketsController);

class AppModule {}
Reflect.decorate(
  [Module({
    imports: [NodeIdempotencyModule.forRootAsync({ storage: { adapter: 'memory' } })],
    controllers: [TicketsController],
  })],
  AppModule);

async function main() {
  const app = await NestFactory.create(AppModule, { logger: ['error'] });
  await app.listen(Number(process.argv[2] || 0), '127.0.0.1');
  console.log(`listening on http://127.0.0.1:${app.getHttpServer().address().port}`);
}
main();
