// Shared helpers for the JS SDK suite, in either mode.
//
// Debug mode (scripts/test-sdk): E2B_DEBUG=true, no control API; Sandbox.create() talks straight
// to envd on localhost:49983, assumed version 99.99.99, and commands run on this host. Tests that
// change a daemon's state (access token, /init env vars) or restart it get a private daemon on a
// free port, reached through the SDK's `sandboxUrl` option.
// Normal mode (scripts/test-sandboxd-sdk, chosen by setting E2B_API_URL): the SDK calls the
// control API and reaches real sandboxes through E2B_SANDBOX_URL. Each test file (one flow:
// files, commands) gets a sandbox of its own, killed when the file is done.
import { spawn } from 'node:child_process'
import { chmodSync, mkdtempSync, openSync, readFileSync, closeSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { after } from 'node:test'
import { fileURLToPath } from 'node:url'
import { setTimeout as sleep } from 'node:timers/promises'

import { Sandbox } from 'e2b'

export const normalMode = Boolean(process.env.E2B_API_URL)
if (!normalMode) process.env.E2B_DEBUG = 'true'

// Who runs commands and owns new files by default: envd's own default (root) in debug mode, the
// `user` the control plane's /init names in a real sandbox.
export const defaultUser = normalMode ? 'user' : 'root'
export const debugOnly = {
  skip: normalMode && 'drives private envd daemons directly (debug mode: scripts/test-sdk)',
}
export const normalOnly = {
  skip: !normalMode && 'needs the control API and real sandboxes (normal mode: scripts/test-sandboxd-sdk)',
  timeout: 60_000,
}

const repoRoot = resolve(dirname(fileURLToPath(import.meta.url)), '..', '..', '..')
const envdPython = process.env.ENVD_PYTHON ?? join(repoRoot, '.venv', 'bin', 'python')

export { sleep }

// Node runs each test file in a process of its own: this file's sandbox in normal mode.
let fileSandbox = null
after(async () => {
  if (fileSandbox !== null) await (await fileSandbox).kill()
})

export function sandbox() {
  if (!normalMode) return Sandbox.create()
  fileSandbox ??= Sandbox.create()
  return fileSandbox
}

// stdout of `command` run by bash as root where the sandbox's files are: to check what the files
// API did, or change files behind its back, another way than the files API itself.
export async function sh(sbx, command) {
  return (await sbx.commands.run(command, { user: 'root' })).stdout
}

// A fresh directory every user may write to (in the sandbox: on this host in debug mode),
// removed when the test ends.
export async function workdir(t, sbx) {
  const dir = (await sh(sbx, 'd=$(mktemp -d /tmp/sdk-e2e-js-XXXXXX) && chmod 777 $d && echo $d')).trim()
  t.after(() => sh(sbx, `rm -rf -- '${dir}'`))
  return dir
}

// A fresh directory on this host for a private daemon (which always runs here, even when the
// shared envd is inside a booted image), removed when the test ends.
export function hostWorkdir(t) {
  const dir = mkdtempSync(join(tmpdir(), 'sdk-e2e-js-'))
  chmodSync(dir, 0o777)
  t.after(() => rmSync(dir, { recursive: true, force: true }))
  return dir
}

export async function waitUntil(predicate, timeoutMs = 15000) {
  const deadline = Date.now() + timeoutMs
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error('condition not met in time')
    await sleep(50)
  }
}

function freePort() {
  return new Promise((resolvePort, reject) => {
    const server = createServer()
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address()
      server.close(() => resolvePort(port))
    })
  })
}

// envd on one fixed port that can be stopped and started again on that same port.
export class Daemon {
  static async start(t) {
    const daemon = new Daemon(await freePort())
    await daemon.start()
    t.after(async () => {
      await daemon.stop()
      const log = daemon.log()
      if (log.includes('Traceback (most recent call last)')) {
        throw new Error(`envd logged a traceback:\n${log}`)
      }
      rmSync(daemon.logDir, { recursive: true, force: true })
    })
    return daemon
  }

  constructor(port) {
    this.port = port
    this.url = `http://localhost:${port}`
    this.logDir = mkdtempSync(join(tmpdir(), 'envd-js-log-'))
    this.logPath = join(this.logDir, 'envd.log')
    this.proc = null
  }

  async start() {
    const log = openSync(this.logPath, 'a')
    const envd = [envdPython, '-m', 'envd', '-isnotfc', '-bind', '127.0.0.1', '-port', String(this.port)]
    const env = { PATH: process.env.PATH ?? '/usr/bin:/bin', LANG: 'C.UTF-8' }
    // A daemon must not outlive a test run killed hard; setpriv (util-linux) sets the
    // parent-death signal and execs envd in the same process.
    this.proc = spawn('setpriv', ['--pdeathsig', 'TERM', '--', ...envd], {
      cwd: repoRoot,
      env,
      stdio: ['ignore', log, log],
    })
    closeSync(log)
    const exited = new Promise((done) => this.proc.once('exit', done))
    this.exited = exited
    const deadline = Date.now() + 20000
    while (Date.now() < deadline) {
      if (this.proc.exitCode !== null) throw new Error(`envd exited at startup:\n${this.log()}`)
      try {
        if ((await fetch(`${this.url}/health`)).ok) return
      } catch {
        // not listening yet
      }
      await sleep(50)
    }
    throw new Error(`envd did not answer /health in 20 s:\n${this.log()}`)
  }

  async stop() {
    const proc = this.proc
    this.proc = null
    if (proc === null || proc.exitCode !== null || proc.signalCode !== null) return
    proc.kill('SIGTERM')
    const timer = setTimeout(() => proc.kill('SIGKILL'), 10000)
    await this.exited
    clearTimeout(timer)
  }

  log() {
    try {
      return readFileSync(this.logPath, 'utf8')
    } catch {
      return ''
    }
  }

  // POST /init the way the E2B orchestrator does after creating a sandbox.
  init(body, token) {
    const headers = { 'Content-Type': 'application/json' }
    if (token) headers['X-Access-Token'] = token
    return fetch(`${this.url}/init`, { method: 'POST', headers, body: JSON.stringify(body) })
  }

  // A Sandbox bound to this daemon; with a token, sent the way the SDK sends its own.
  sandbox(token) {
    if (token === undefined) return Sandbox.create({ sandboxUrl: this.url })
    // Only a non-debug create() learns a token (from the E2B API); the constructor is how the
    // SDK then builds the sandbox, so the test builds it the same way.
    return new Sandbox({
      sandboxId: 'debug_sandbox_id',
      envdVersion: '99.99.99',
      envdAccessToken: token,
      sandboxUrl: this.url,
      debug: true,
    })
  }
}
