// Shared by the JS SDK's networking tests (run by tests/network/test_sdk_network.py inside the
// fake internet's `uplink`, against `sandboxd serve --network-pool` there): what the fake
// internet holds, the sandboxes a test makes, and what runs inside a sandbox (its python3 and
// curl, as a user would) to see where its traffic goes.
import { readFileSync } from 'node:fs'
import { request } from 'node:http'
import { request as requestTls } from 'node:https'
import { constants } from 'node:os'

import { CommandExitError, Sandbox } from 'e2b'

if (!process.env.FAKE_INTERNET) {
  throw new Error('run by tests/network/test_sdk_network.py, inside the fake internet')
}
// http, sub and other: echo servers (HTTP on :80, HTTPS on :443) for example.test,
// a.example.test and other.test, with certificates of the CA `ca` (PEM); index: the package index, and package its one
// package ({ project, module, greeting }); uplink: serve's namespace's address on the fake
// internet; api_port: serve's API and proxy port.
export const internet = JSON.parse(process.env.FAKE_INTERNET)
const PACKAGE = internet.package

// The firewall's refusal: ICMP "administratively prohibited", EHOSTUNREACH at once.
export const REFUSED = String(constants.errno.EHOSTUNREACH)
export const CONNECTED = 'connected'

// Scripts run in the sandbox by its python3, shared with the Python suites.
export const inSandbox = (name) =>
  readFileSync(new URL(`../../../network/in_sandbox/${name}.py`, import.meta.url), 'utf8')
const CONNECT = inSandbox('connect')
const ADDRESSES = inSandbox('addresses')

const quote = (arg) => `'${String(arg).replaceAll("'", "'\\''")}'`

// Sandbox.create(opts), killed when the test ends whatever happened.
export async function create(t, opts) {
  const sbx = await Sandbox.create(opts)
  t.after(() => Sandbox.kill(sbx.sandboxId))
  return sbx
}

export async function python(sbx, script, ...args) {
  return (await sbx.commands.run(['python3', '-c', script, ...args].map(quote).join(' '))).stdout.trim()
}

// "connected", or the errno (as text) a TCP connection from the sandbox got.
export const connect = (sbx, address, port) => python(sbx, CONNECT, address, port)

// The sandbox's own address and its gateway (the host end of its link).
export async function addresses(sbx) {
  const [own, gateway] = (await python(sbx, ADDRESSES)).split(' ')
  return { own, gateway }
}

// The echo server's JSON for `GET http://ADDRESS/` from the sandbox.
export async function curl(sbx, address) {
  return JSON.parse((await sbx.commands.run(`curl -sS --max-time 30 http://${address}/`)).stdout)
}

// Where a sandbox keeps the fake internet's CA (`trust`), for curl's --cacert.
const CA = '/tmp/ca.pem'

// Give the sandbox the fake internet's CA (through the SDK's filesystem API), at CA.
export const trust = (sbx) => sbx.files.write(CA, internet.ca)

// The echo server's JSON for curl's GET of `url` from the sandbox (with these options, and
// trusting the CA `trust` gave it), or curl's exit code when it got no answer.
export async function fetchFrom(sbx, url, ...options) {
  const argv = ['curl', '-sS', '--max-time', '30', '--cacert', CA, ...options, url]
  try {
    return JSON.parse((await sbx.commands.run(argv.map(quote).join(' '))).stdout)
  } catch (e) {
    if (e instanceof CommandExitError) return e.exitCode
    throw e
  }
}

// `pip install` of the fake index's package into a fresh virtualenv in the sandbox (pip comes
// with python3-venv), then its greeting, imported. A failure throws the SDK's CommandExitError;
// --retries 0: a refused connection fails at once.
export async function pipInstall(sbx, index) {
  const { stdout } = await sbx.commands.run(
    `v=$(mktemp -d)/venv && python3 -m venv $v && $v/bin/pip --isolated --disable-pip-version-check ` +
      `install --no-cache-dir --retries 0 --index-url http://${index}/simple/ ` +
      `--trusted-host ${index} ${PACKAGE.project} >&2 && ` +
      `$v/bin/python -c 'import ${PACKAGE.module} as m; print(m.GREETING)'`,
    { timeoutMs: 120_000 },
  )
  return stdout.trim()
}

// GET `url` with these headers (node:http: fetch may not set Host); { status, body }.
export function get(url, headers) {
  const send = url.startsWith('https:') ? requestTls : request // TLS trusts NODE_EXTRA_CA_CERTS
  return new Promise((resolve, reject) => {
    const req = send(url, { headers }, (res) => {
      let body = ''
      res.setEncoding('utf8')
      res.on('data', (chunk) => (body += chunk))
      res.on('end', () => resolve({ status: res.statusCode, body }))
    })
    req.on('error', reject)
    req.end()
  })
}
