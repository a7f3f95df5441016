// A modern-only (2026-07-28) MCP server for the era bridge tests: the TypeScript SDK v2
// (`@modelcontextprotocol/server` with `@modelcontextprotocol/node`, installed by
// scripts/install-peers into .peers/node), with handshake-era callers refused
// (`legacy: 'reject'`: `initialize` and every other request without the 2026-07-28
// `_meta` envelope get -32022 naming the supported revisions; over HTTP with status 400).
//
//   node tests/peers/era/modern_server.mjs --transport stdio --effects FILE
//   node tests/peers/era/modern_server.mjs --transport http --port N --effects FILE
//        [--node-modules .peers/node/node_modules] [--response-mode auto|json|sse]
//
// HTTP: Streamable HTTP on 127.0.0.1:N, path /mcp only (404 elsewhere), Host and Origin
// limited to loopback names; no sessions (GET/DELETE answer 405). Once bound it writes
// `listening on 127.0.0.1:N` to stderr. `--node-modules` defaults to the peers' folder
// ($PEERS_DIR_FOR_TUNNELGATE_TESTS/node/node_modules, else .peers/node/node_modules of
// this checkout).
//
// Tools (the effects file gets one line per event, appended, flushed and fsynced, so a
// test counts what the server itself executed; without --effects a temporary file is used):
//   effect(label)   appends `label`; answers "effect <label> #<n>", n = lines now in the file
//   ask(question)   multi-round-trip: appends `ask-start` on every handler run; without an
//                   accepted answer AND a valid requestState it answers `input_required`
//                   with inputRequests {"name": elicitation/create (form: {name: string})}
//                   and a signed requestState (HMAC, per-process key, 600 s, bound to the
//                   method); with them it appends `ask-end` and answers "hello <name>"; a
//                   declined or cancelled answer ends with "no answer (<action>)".
//                   A tampered, expired or foreign requestState is refused by the SDK:
//                   -32602 "Invalid or expired requestState", data.reason
//                   "invalid_request_state" (the handler does not run).
//   sample(prompt)  multi-round-trip: inputRequests {"sample": sampling/createMessage};
//                   answers the sampled text
//   roots()         multi-round-trip: inputRequests {"roots": roots/list}; answers the root
//                   URIs joined by newlines
//   route(region, label, priority?)  region and priority are `x-mcp-header` arguments
//                   (headers Mcp-Param-Region, Mcp-Param-Priority; the SDK refuses a call
//                   whose headers are missing or disagree with the body: HTTP 400, -32020,
//                   before the handler runs); appends `route <label>`; answers
//                   "route <region> <priority> #<n>"
//   chatty()        log messages at debug, info, warning ("debug line", "info line",
//                   "warning line"; delivered only to a request whose envelope carries
//                   io.modelcontextprotocol/logLevel, at or above it), then "logged"
// Resource data://greeting ("hello from modern"); prompt greet(name).
// Instructions: "modern test server".

import { randomBytes } from 'node:crypto';
import { appendFileSync, closeSync, fsyncSync, mkdtempSync, openSync, readFileSync, writeSync } from 'node:fs';
import { createServer } from 'node:http';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

const { values: args } = parseArgs({
  options: {
    transport: { type: 'string', default: 'stdio' },
    port: { type: 'string' },
    effects: { type: 'string' },
    'node-modules': { type: 'string' },
    'response-mode': { type: 'string', default: 'auto' },
  },
  strict: true,
});
function fail(message) {
  process.stderr.write(`modern_server.mjs: ${message}\n`);
  process.exit(2);
}
if (!['stdio', 'http'].includes(args.transport)) fail('--transport must be stdio or http');
if (args.transport === 'http' && !args.port) fail('--transport http needs --port');
if (!['auto', 'json', 'sse'].includes(args['response-mode'])) fail('--response-mode must be auto, json or sse');

// The packages live in the peers' folder, not beside this script.
const here = dirname(fileURLToPath(import.meta.url));
const nodeModules = resolve(
  args['node-modules'] ??
    join(process.env.PEERS_DIR_FOR_TUNNELGATE_TESTS ?? join(here, '..', '..', '..', '.peers'), 'node', 'node_modules'),
);
const load = (path) => import(pathToFileURL(join(nodeModules, path)).href);
const sdk = await load('@modelcontextprotocol/server/dist/index.mjs');
const { McpServer, createMcpHandler, createRequestStateCodec, inputRequired, inputResponse, acceptedContent, fromJsonSchema } =
  sdk;

const effectsPath = args.effects ?? join(mkdtempSync(join(tmpdir(), 'modern-effects-')), 'effects');
appendFileSync(effectsPath, '');
function appendEffect(line) {
  const fd = openSync(effectsPath, 'a');
  try {
    writeSync(fd, `${line}\n`);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  return readFileSync(effectsPath, 'utf8').split('\n').filter((l) => l !== '').length;
}

// One key for the process: every per-request instance verifies what another minted.
const codec = createRequestStateCodec({ key: randomBytes(32), ttlSeconds: 600, bind: (ctx) => ctx.mcpReq.method });

const object = (properties, required = Object.keys(properties)) =>
  fromJsonSchema({ type: 'object', properties, required });
const text = (value) => ({ content: [{ type: 'text', text: value }] });
const nameSchema = { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] };

function build() {
  const server = new McpServer(
    { name: 'tunnelgate-modern-peer', version: '2.4.0' },
    {
      instructions: 'modern test server',
      capabilities: { logging: {} },
      requestState: { verify: codec.verify },
    },
  );

  server.registerTool(
    'effect',
    { description: 'A side effect: appends label to the effects file', inputSchema: object({ label: { type: 'string' } }) },
    async ({ label }) => text(`effect ${label} #${appendEffect(label)}`),
  );

  server.registerTool(
    'ask',
    { description: 'Asks the caller for a name (input required)', inputSchema: object({ question: { type: 'string' } }) },
    async ({ question }, ctx) => {
      appendEffect('ask-start');
      const state = ctx.mcpReq.requestState();
      const answer = inputResponse(ctx.mcpReq.inputResponses, 'name');
      if (state !== undefined && answer.kind === 'elicit') {
        if (answer.action !== 'accept') {
          appendEffect('ask-end');
          return text(`no answer (${answer.action})`);
        }
        const content = acceptedContent(ctx.mcpReq.inputResponses, 'name');
        if (typeof content?.name === 'string') {
          appendEffect('ask-end');
          return text(`hello ${content.name}`);
        }
      }
      return inputRequired({
        inputRequests: { name: inputRequired.elicit({ message: question, requestedSchema: nameSchema }) },
        requestState: await codec.mint({ question }, ctx),
      });
    },
  );

  server.registerTool(
    'sample',
    { description: 'Asks the caller to sample (input required)', inputSchema: object({ prompt: { type: 'string' } }) },
    async ({ prompt }, ctx) => {
      const answer = inputResponse(ctx.mcpReq.inputResponses, 'sample');
      if (answer.kind === 'sampling') {
        const content = answer.result.content;
        return text(Array.isArray(content) ? content.map((c) => c.text ?? '').join('') : (content.text ?? ''));
      }
      return inputRequired({
        inputRequests: {
          sample: inputRequired.createMessage({
            messages: [{ role: 'user', content: { type: 'text', text: prompt } }],
            maxTokens: 64,
          }),
        },
      });
    },
  );

  server.registerTool(
    'roots',
    { description: 'Asks the caller for its roots (input required)', inputSchema: object({}, []) },
    async (_args, ctx) => {
      const answer = inputResponse(ctx.mcpReq.inputResponses, 'roots');
      if (answer.kind === 'roots') return text(answer.roots.map((r) => r.uri).join('\n'));
      return inputRequired({ inputRequests: { roots: inputRequired.listRoots() } });
    },
  );

  server.registerTool(
    'route',
    {
      description: 'Routed by its region (an x-mcp-header argument): appends label to the effects file',
      inputSchema: fromJsonSchema({
        type: 'object',
        properties: {
          region: { type: 'string', 'x-mcp-header': 'Region' },
          priority: { type: 'integer', 'x-mcp-header': 'Priority' },
          label: { type: 'string' },
        },
        required: ['region', 'label'],
      }),
    },
    async ({ region, priority, label }) => text(`route ${region} ${priority} #${appendEffect(`route ${label}`)}`),
  );

  server.registerTool(
    'chatty',
    { description: 'Emits log messages at debug, info and warning', inputSchema: object({}, []) },
    async (_args, ctx) => {
      await ctx.mcpReq.log('debug', 'debug line');
      await ctx.mcpReq.log('info', 'info line');
      await ctx.mcpReq.log('warning', 'warning line');
      return text('logged');
    },
  );

  server.registerResource('greeting', 'data://greeting', { description: 'A fixed greeting' }, async (uri) => ({
    contents: [{ uri: uri.href ?? String(uri), text: 'hello from modern' }],
  }));

  server.registerPrompt(
    'greet',
    { description: 'Greets name', argsSchema: object({ name: { type: 'string' } }) },
    ({ name }) => ({ messages: [{ role: 'user', content: { type: 'text', text: `Please greet ${name} warmly.` } }] }),
  );

  return server;
}

const onerror = (error) => process.stderr.write(`modern_server.mjs: ${error?.message ?? error}\n`);

if (args.transport === 'stdio') {
  const { serveStdio } = await load('@modelcontextprotocol/server/dist/stdio.mjs');
  serveStdio(build, { legacy: 'reject', onerror });
} else {
  const { toNodeHandler, localhostHostValidation, localhostOriginValidation } = await load(
    '@modelcontextprotocol/node/dist/index.mjs',
  );
  const handler = toNodeHandler(
    createMcpHandler(build, { legacy: 'reject', responseMode: args['response-mode'], onerror }),
  );
  const validateHost = localhostHostValidation();
  const validateOrigin = localhostOriginValidation();
  const port = Number(args.port);
  const server = createServer(async (req, res) => {
    if (!validateHost(req, res) || !validateOrigin(req, res)) return;
    if (new URL(req.url, 'http://127.0.0.1').pathname !== '/mcp') {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
      return;
    }
    try {
      await handler(req, res);
    } catch (error) {
      onerror(error);
      if (!res.headersSent) res.writeHead(500).end();
    }
  });
  server.on('error', (error) => {
    process.stderr.write(`cannot bind 127.0.0.1:${port}: ${error.message}\n`);
    process.exit(1);
  });
  server.listen(port, '127.0.0.1', () => {
    process.stderr.write(`listening on 127.0.0.1:${server.address().port}\n`);
  });
}
