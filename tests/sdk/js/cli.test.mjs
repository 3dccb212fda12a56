// The E2B CLI (@e2b/cli) as a client of the control API and the proxy (normal mode only), with
// the three environment variables the SDKs use: sandbox list, info, exec, logs, metrics, pause,
// resume and kill of a sandbox made with the SDK, and its snapshot commands.
import assert from 'node:assert/strict'
import { execFile } from 'node:child_process'
import { dirname, join } from 'node:path'
import { test } from 'node:test'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'

import { Sandbox } from 'e2b'

import { normalOnly, sleep } from './helpers.mjs'

const cliPath = join(dirname(fileURLToPath(import.meta.url)), 'node_modules', '@e2b', 'cli',
  'dist', 'index.js')
const run = promisify(execFile)

// The CLI's stdout; a non-zero exit throws (with stdout and stderr on the error).
async function cli(...args) {
  return (await cliOutput(...args)).stdout
}

async function cliOutput(...args) {
  const running = run(process.execPath, [cliPath, ...args], { timeout: 60_000 })
  running.child.stdin.end() // nothing to pipe in: `exec` would otherwise wait for it
  return await running
}

async function waitUntilAsync(predicate, timeoutMs) {
  const deadline = Date.now() + timeoutMs
  while (!(await predicate())) {
    if (Date.now() > deadline) throw new Error('condition not met in time')
    await sleep(200)
  }
}

// Lines of JSON objects, as `--format json` prints logs and metrics.
function jsonLines(text) {
  return text.split('\n').filter((line) => line.startsWith('{')).map((line) => JSON.parse(line))
}

test('the CLI lists, inspects, runs in, reads logs and metrics of, pauses, resumes and kills a sandbox',
  normalOnly, async (t) => {
    const sbx = await Sandbox.create()
    t.after(() => Sandbox.kill(sbx.sandboxId))
    const id = sbx.sandboxId

    const listed = JSON.parse(await cli('sandbox', 'list', '--format', 'json'))
    assert.ok(listed.some((s) => s.sandboxId === id), JSON.stringify(listed))
    const info = JSON.parse(await cli('sandbox', 'info', id, '--format', 'json'))
    assert.equal(info.sandboxId, id)

    assert.equal((await cli('sandbox', 'exec', id, 'echo', 'hello-from-cli')).trim(), 'hello-from-cli')

    const logs = jsonLines(await cli('sandbox', 'logs', id, '--format', 'json'))
    assert.ok(logs.some((l) => l.logger?.startsWith('envd') && /listening/.test(l.message)),
      JSON.stringify(logs))

    // The first metrics sample is taken right after the create; wait for it, not a fixed time.
    let metrics = []
    await waitUntilAsync(async () => {
      metrics = jsonLines(await cli('sandbox', 'metrics', id, '--format', 'json'))
      return metrics.length > 0
    }, 30_000)
    assert.equal(metrics[0].memTotal, 1024 * 1024 * 1024) // the sandbox's, not the host's

    await cli('sandbox', 'pause', id)
    assert.equal((await Sandbox.getInfo(id)).state, 'paused')
    await cli('sandbox', 'resume', id)
    assert.equal((await Sandbox.getInfo(id)).state, 'running')
    await cli('sandbox', 'kill', id)
    assert.ok(!(await Sandbox.list().nextItems()).some((s) => s.sandboxId === id))
  })

test('the CLI takes, lists and deletes snapshots', normalOnly, async (t) => {
  const sbx = await Sandbox.create()
  t.after(() => Sandbox.kill(sbx.sandboxId))
  const name = `cli-snap-${sbx.sandboxId}`
  const created = await cli('sandbox', 'snapshot', 'create', sbx.sandboxId, '-n', name)
  assert.match(created, new RegExp(`Created snapshot ${name}:default from sandbox ${sbx.sandboxId}`))
  const listed = JSON.parse(await cli('sandbox', 'snapshot', 'list', sbx.sandboxId, '--format', 'json'))
  assert.deepEqual(listed, [{ snapshotId: `${name}:default`, names: [name] }])
  assert.match(await cli('sandbox', 'snapshot', 'delete', `${name}:default`), /has been deleted/)
  const again = await cliOutput('sandbox', 'snapshot', 'delete', `${name}:default`)
  assert.match(again.stderr, /wasn't found/)
})
