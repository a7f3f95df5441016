// A real OAuth 2.0 authorization server for the Harpoon tests: `oidc-provider` (the
// OpenID-certified Node.js implementation, installed by scripts/install-peers), on
// 127.0.0.1 only, over plain http, with issuer `http://127.0.0.1:PORT`.
//
//   node tests/peers/oidc_provider.mjs --port N --node-modules .peers/node/node_modules \
//        --rs-client-id ID --rs-client-secret SECRET
//
// Enabled: open dynamic client registration (RFC 7591, no initial access token), the
// client_credentials grant (a token without a browser), introspection (RFC 7662) and
// revocation (RFC 7009). One static confidential client, the resource server's
// (`--rs-client-id`/`--rs-client-secret`, client_secret_basic), may introspect any token.
//
// Writes `listening on 127.0.0.1:PORT` to stderr once it accepts connections, and then
// `seen METHOD PATH` for every request it receives (never a query, header or body).

import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';

const { values: args } = parseArgs({
  options: {
    port: { type: 'string' },
    'node-modules': { type: 'string' },
    'rs-client-id': { type: 'string' },
    'rs-client-secret': { type: 'string' },
  },
  strict: true,
});
for (const name of ['port', 'node-modules', 'rs-client-id', 'rs-client-secret']) {
  if (!args[name]) {
    process.stderr.write(`oidc_provider.mjs: --${name} is required\n`);
    process.exit(2);
  }
}
const port = Number(args.port);
const issuer = `http://127.0.0.1:${port}`;

// The package lives in the peers' folder, not beside this script.
const entry = pathToFileURL(join(args['node-modules'], 'oidc-provider', 'lib', 'index.js'));
const { default: Provider } = await import(entry.href);

const configuration = {
  clients: [
    {
      client_id: args['rs-client-id'],
      client_secret: args['rs-client-secret'],
      grant_types: ['client_credentials'],
      response_types: [],
      redirect_uris: [],
      token_endpoint_auth_method: 'client_secret_basic',
    },
  ],
  features: {
    devInteractions: { enabled: false },
    registration: { enabled: true, initialAccessToken: false },
    clientCredentials: { enabled: true },
    // Any authenticated confidential client may introspect or revoke (the resource
    // server introspects tokens issued to the registered client).
    introspection: {
      enabled: true,
      allowedPolicy: async (ctx, client) => client.clientAuthMethod !== 'none',
    },
    revocation: {
      enabled: true,
      allowedPolicy: async (ctx, client, token) => token.clientId === client.clientId,
    },
  },
  ttl: {
    AccessToken: 600,
    ClientCredentials: 600,
  },
  // Only the endpoints a client_credentials flow uses: nothing needs a browser.
  renderError: async (ctx, out) => {
    ctx.type = 'json';
    ctx.body = out;
  },
};

const provider = new Provider(issuer, configuration);
// Plain http on loopback: no proxy in front, the issuer's scheme is the request's.
provider.proxy = false;

provider.use(async (ctx, next) => {
  process.stderr.write(`seen ${ctx.method} ${ctx.path}\n`);
  await next();
});

const server = provider.listen(port, '127.0.0.1', () => {
  process.stderr.write(`listening on 127.0.0.1:${port}\n`);
});
server.on('error', (err) => {
  process.stderr.write(`oidc_provider.mjs: ${err.code || err.message}\n`);
  process.exit(1);
});

for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => server.close(() => process.exit(0)));
}
