// Shared by the JS SDK's template-build tests (run by tests/builds/test_sdk_builds.py inside the
// fake internet's `uplink`, against `sandboxd serve` there): what the harness made (images in
// its registry, the package index), unique names, the REST calls the SDK has no method for
// (delete, a build's status), and the sandboxes and templates a test makes, removed afterwards.
import { randomBytes } from 'node:crypto'
import { mkdtempSync, mkdirSync, writeFileSync } from 'node:fs'
import { request } from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

import { Sandbox } from 'e2b'

if (!process.env.BUILD_FACTS || !process.env.E2B_API_URL) {
  throw new Error('run by tests/builds/test_sdk_builds.py, inside the fake internet')
}
// images: { debian, busybox, "no-systemd" } references in the test's registry; index: the
// package index's address; indexRoot: its directory (a file put there is served); package:
// { project, module, greeting }.
export const facts = JSON.parse(process.env.BUILD_FACTS)

export const unique = (what) => `js-${what}-${randomBytes(4).toString('hex')}`
export const nonce = () => randomBytes(8).toString('hex')
// [a shell command printing `mark` in upper case, what it prints]: the log shows a step's
// command too, so only the upper-case text proves the step ran and its output was logged.
export const shouted = (mark) => [`echo ${mark} | tr a-z A-Z`, mark.toUpperCase()]

export async function api(method, path, body) {
  const headers = { 'X-API-Key': process.env.E2B_API_KEY }
  if (body !== undefined) headers['Content-Type'] = 'application/json'
  return fetch(process.env.E2B_API_URL + path, {
    method, headers, body: body === undefined ? undefined : JSON.stringify(body),
  })
}

export async function templateId(name) {
  const found = await api('GET', `/templates/aliases/${name}`)
  if (found.status === 404) return null
  if (found.status !== 200) throw new Error(`alias ${name}: ${found.status} ${await found.text()}`)
  return (await found.json()).templateID
}

export async function deleteTemplate(name) {
  const id = await templateId(name.split(':')[0])
  if (id === null) return
  const deleted = await api('DELETE', `/templates/${id}`)
  if (![200, 204].includes(deleted.status)) {
    throw new Error(`delete ${name}: ${deleted.status} ${await deleted.text()}`)
  }
}

export async function buildStatus(templateID, buildID) {
  const got = await api('GET', `/templates/${templateID}/builds/${buildID}/status?logsOffset=0`)
  if (got.status !== 200) throw new Error(`status: ${got.status} ${await got.text()}`)
  return got.json()
}

// What each test made: its sandboxes are killed, then its templates deleted (one in use cannot
// be), when it ends, whatever happened.
const madeBy = new WeakMap()
function made(t) {
  if (!madeBy.has(t)) {
    const made = { sandboxes: [], templates: [] }
    madeBy.set(t, made)
    t.after(async () => {
      for (const id of made.sandboxes) await Sandbox.kill(id)
      for (const name of made.templates) await deleteTemplate(name)
    })
  }
  return madeBy.get(t)
}

// The template `name`, deleted when the test ends.
export function built(t, name) {
  made(t).templates.push(name)
  return name
}

// Sandbox.create(template), killed when the test ends.
export async function create(t, template) {
  const sbx = await Sandbox.create(template)
  made(t).sandboxes.push(sbx.sandboxId)
  return sbx
}

export async function run(sbx, cmd) {
  return (await sbx.commands.run(cmd)).stdout.trim()
}

// A build context: { relative path: contents }, in a fresh directory.
export function context(files) {
  const dir = mkdtempSync(join(tmpdir(), 'build-ctx-'))
  for (const [path, text] of Object.entries(files)) {
    mkdirSync(join(dir, path, '..'), { recursive: true })
    writeFileSync(join(dir, path), text)
  }
  return dir
}

// { url, path } of a file not yet on the index: a build step waits for the URL, the test lets
// it go on by writing the path.
export function releaseFile() {
  const name = `release-${nonce()}`
  return { url: `http://${facts.index}/${name}`, path: join(facts.indexRoot, name) }
}

// A shell loop a build step waits in until `get` succeeds (bounded: fails rather than hangs).
export const waitFor = (get) =>
  `for i in $(seq 1500); do ${get} >/dev/null 2>&1 && exit 0; sleep 0.2; done; exit 1`

export const pipInstall = (venv) =>
  `python3 -m venv ${venv} && ${venv}/bin/pip --isolated --disable-pip-version-check install ` +
  `--no-cache-dir --retries 0 --index-url http://${facts.index}/simple/ ` +
  `--trusted-host ${facts.index} ${facts.package.project}`

// onBuildLogs: every entry, and the template and build IDs the SDK's own entries name.
export class Logs {
  entries = []
  ids = null
  add = (entry) => {
    this.entries.push(entry)
    const m = /^Template created with ID: (\S+), Build ID: (\S+)/.exec(entry.message)
    if (m) this.ids = { templateID: m[1], buildID: m[2] }
  }
  get text() { return this.entries.map((e) => e.message).join('\n') }
  lines(needle) { return this.entries.map((e) => e.message).filter((m) => m.includes(needle)) }
}

// GET / of the sandbox's `port` through sandboxd's proxy, by the sandbox's host name.
export async function throughProxy(sbx, port) {
  const url = new URL(process.env.E2B_SANDBOX_URL)
  return new Promise((resolve, reject) => {
    const req = request({ host: url.hostname, port: url.port, path: '/',
      headers: { Host: sbx.getHost(port) } }, (res) => {
      let body = ''
      res.on('data', (chunk) => { body += chunk })
      res.on('end', () => resolve({ status: res.statusCode, body }))
    })
    req.on('error', reject)
    req.end()
  })
}
