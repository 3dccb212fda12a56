// Sandbox.commands and Sandbox.pty through the real JS SDK.
import assert from 'node:assert/strict'
import { test } from 'node:test'

import { CommandExitError, InvalidArgumentError, NotFoundError, TimeoutError } from 'e2b'

import { defaultUser, sandbox, waitUntil, workdir } from './helpers.mjs'

// Commands killed early run as `user`: a SIGKILL landing in root's login profile (pyenv rehash
// on this kind of machine) leaves a lock that stalls every later root shell.
const KILLED_EARLY_USER = 'user'
const encode = (s) => new TextEncoder().encode(s)
const decode = (chunks) => Buffer.concat(chunks).toString()

test('run returns output and exit code', async () => {
  const sbx = await sandbox()
  const result = await sbx.commands.run('echo out; echo err >&2')
  assert.deepEqual([result.exitCode, result.stdout, result.stderr], [0, 'out\n', 'err\n'])
})

test('non-zero exit rejects with CommandExitError', async () => {
  const sbx = await sandbox()
  await assert.rejects(sbx.commands.run('echo partial; echo broken >&2; exit 3'), (e) => {
    assert.ok(e instanceof CommandExitError)
    assert.deepEqual([e.exitCode, e.stdout, e.stderr, e.error], [3, 'partial\n', 'broken\n', 'exit status 3'])
    return true
  })
})

test('stdout and stderr callbacks arrive while the command runs', async () => {
  const sbx = await sandbox()
  const seen = []
  const started = Date.now()
  await sbx.commands.run('echo one; sleep 0.5; echo two >&2; sleep 0.5; echo three', {
    onStdout: (s) => seen.push(['out', s, Date.now() - started]),
    onStderr: (s) => seen.push(['err', s, Date.now() - started]),
  })
  assert.deepEqual(
    seen.map(([k, s]) => [k, s]),
    [['out', 'one\n'], ['err', 'two\n'], ['out', 'three\n']],
  )
  assert.ok(seen[0][2] < seen[2][2] - 700, 'output was delivered at exit, not streamed')
})

test('large output arrives complete before the exit', async () => {
  const sbx = await sandbox()
  const result = await sbx.commands.run("head -c 3000000 /dev/zero | tr '\\0' x; printf END")
  assert.equal(result.stdout.length, 3000003)
  assert.ok(result.stdout.endsWith('xEND'))
})

test('background command, list, connect and wait', async () => {
  const sbx = await sandbox()
  const handle = await sbx.commands.run('sleep 0.5; echo late; sleep 0.5', { background: true })
  try {
    const listed = (await sbx.commands.list()).find((p) => p.pid === handle.pid)
    assert.ok(listed, 'the background command is listed')
    assert.equal(listed.args.at(-1), 'sleep 0.5; echo late; sleep 0.5')
    await handle.disconnect()
    const out = []
    const again = await sbx.commands.connect(handle.pid, { onStdout: (s) => out.push(s) })
    const result = await again.wait()
    assert.deepEqual([result.exitCode, result.stdout, out.join('')], [0, 'late\n', 'late\n'])
  } finally {
    await sbx.commands.kill(handle.pid)
  }
  assert.ok(!(await sbx.commands.list()).some((p) => p.pid === handle.pid))
})

test('kill, and errors for missing processes', async () => {
  const sbx = await sandbox()
  const handle = await sbx.commands.run('sleep 30', { background: true, user: KILLED_EARLY_USER })
  assert.equal(await handle.kill(), true)
  await assert.rejects(handle.wait(), (e) => e instanceof CommandExitError && e.exitCode === -1)
  assert.equal(await sbx.commands.kill(handle.pid), false)
  assert.equal(await sbx.commands.kill(999999), false)
  await assert.rejects(sbx.commands.connect(999999), NotFoundError)
  await assert.rejects(sbx.commands.sendStdin(999999, 'x'), NotFoundError)
})

test('send stdin and close it', async () => {
  const sbx = await sandbox()
  const handle = await sbx.commands.run('cat', { background: true, stdin: true })
  await handle.sendStdin('hello ')
  await sbx.commands.sendStdin(handle.pid, encode('world\n'))
  await handle.closeStdin()
  const result = await handle.wait()
  assert.deepEqual([result.exitCode, result.stdout], [0, 'hello world\n'])
  // Without stdin the command reads end-of-file at once.
  await assert.rejects(sbx.commands.run('read -r line'), (e) => e.exitCode === 1)
})

test('env vars, cwd and users', async (t) => {
  const sbx = await sandbox()
  const dir = await workdir(t, sbx)
  const result = await sbx.commands.run('echo "$GREETING|$(pwd)|$(whoami)"', {
    envs: { GREETING: 'hi there' },
    cwd: dir,
  })
  assert.equal(result.stdout, `hi there|${dir}|${defaultUser}\n`)
  assert.equal((await sbx.commands.run('echo $(whoami):$HOME:$(pwd)', { user: 'user' })).stdout, 'user:/home/user:/home/user\n')
  assert.equal((await sbx.commands.run('id -u', { user: 'root' })).stdout, '0\n')
  await assert.rejects(sbx.commands.run('pwd', { cwd: `${dir}/absent` }), InvalidArgumentError)
})

test('command timeout', async () => {
  const sbx = await sandbox()
  const started = Date.now()
  await assert.rejects(sbx.commands.run('sleep 10', { timeoutMs: 1000, user: KILLED_EARLY_USER }), TimeoutError)
  assert.ok(Date.now() - started < 5000)
})

test('command killed while its output is streamed', async () => {
  const sbx = await sandbox()
  const chunks = []
  const handle = await sbx.commands.run('while true; do echo tick; sleep 0.05; done', {
    background: true,
    onStdout: (s) => chunks.push(s),
  })
  await waitUntil(() => chunks.length >= 3)
  await sbx.commands.kill(handle.pid)
  await assert.rejects(handle.wait(), (e) => e instanceof CommandExitError && e.exitCode === -1)
  assert.ok(chunks.join('').startsWith('tick\n'))
})

test('pty: create, send input, resize, kill', async () => {
  const sbx = await sandbox()
  const output = []
  const terminal = await sbx.pty.create({ cols: 80, rows: 24, onData: (d) => output.push(d) })
  await sbx.pty.sendInput(terminal.pid, encode('stty size; echo pty-$((6*7))\n'))
  await waitUntil(() => decode(output).includes('pty-42'))
  assert.ok(decode(output).includes('24 80'))

  await sbx.pty.resize(terminal.pid, { cols: 120, rows: 40 })
  await sbx.pty.sendInput(terminal.pid, encode('stty size; echo resized-$((1+1))\n'))
  await waitUntil(() => decode(output).includes('resized-2'))
  assert.ok(decode(output).includes('40 120'))

  assert.equal(await sbx.pty.kill(terminal.pid), true)
  await assert.rejects(terminal.wait(), (e) => e instanceof CommandExitError && e.exitCode === -1)
})

test('pty: connect and exit', async () => {
  const sbx = await sandbox()
  const terminal = await sbx.pty.create({ cols: 80, rows: 24, onData: () => {} })
  await terminal.disconnect()
  const output = []
  const again = await sbx.pty.connect(terminal.pid, { onData: (d) => output.push(d) })
  await sbx.pty.sendInput(terminal.pid, encode('echo re-$((2+3))ttached; exit 0\n'))
  const result = await again.wait()
  assert.equal(result.exitCode, 0)
  assert.ok(decode(output).includes('re-5ttached'))
})
