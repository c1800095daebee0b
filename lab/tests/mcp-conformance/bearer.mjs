// Preloaded into the conformance suite (`node --import ./bearer.mjs`): `lab mcp --transport http`
// refuses every request without a caller's bearer token (401), and the suite's client has no
// option to send one, so without this file every scenario would fail at the door.
//
// undici announces each request it creates on this diagnostics channel, for Node's own fetch
// (which the MCP SDK's client uses) and for the undici package (which the DNS-rebinding scenario
// uses) alike, and lets a subscriber add a header. The token goes only to the server under test.
import diagnostics_channel from 'node:diagnostics_channel';

const token = process.env.LAB_MCP_BEARER_TOKEN;
const url = process.env.LAB_MCP_URL;
if (!token || !url) {
  throw new Error('bearer.mjs needs LAB_MCP_BEARER_TOKEN and LAB_MCP_URL');
}
const origin = new URL(url).origin;

diagnostics_channel.channel('undici:request:create').subscribe(({ request }) => {
  if (String(request.origin) === origin) {
    request.addHeader('authorization', `Bearer ${token}`);
  }
});
