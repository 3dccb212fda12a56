// /init env vars and access token as the JS SDK sees them, and envd restarts between calls.
// Each test has a private daemon: /init changes daemon-wide state, and a restart must not
// disturb the shared one.
import assert from 'node:assert/strict'
import { test } from 'node:test'

import { AuthenticationError, Sandbox, SandboxError } from 'e2b'

import { Daemon, debugOnly, hostWorkdir, waitUntil } from './helpers.mjs'

test('create({envs}) in debug mode does not call /init', debugOnly, async (t) => {
  const daemon = await Daemon.start(t)
  const sbx = await Sandbox.create({ sandboxUrl: daemon.url, envs: { FROM_CREATE: 'x' } })
  assert.equal((await sbx.commands.run('echo ${FROM_CREATE:-unset}')).stdout, 'unset\n')
})

test('/init env vars reach commands; per-command envs win', debugOnly, async (t) => {
  const daemon = await Daemon.start(t)
  assert.equal((await daemon.init({ envVars: { SANDBOX_WIDE: 'yes', OVERRIDDEN: 'init' } })).status, 204)
  const sbx = await daemon.sandbox()
  const result = await sbx.commands.run('echo "$SANDBOX_WIDE $OVERRIDDEN"', { envs: { OVERRIDDEN: 'command' } })
  assert.equal(result.stdout, 'yes command\n')
  assert.equal((await daemon.init({ envVars: { ONLY: 'this' } })).status, 204)
  assert.equal((await sbx.commands.run('echo "${SANDBOX_WIDE:-gone} $ONLY"')).stdout, 'gone this\n')
})

test('/init defaultUser and defaultWorkdir', debugOnly, async (t) => {
  const dir = hostWorkdir(t)
  const daemon = await Daemon.start(t)
  assert.equal((await daemon.init({ defaultUser: 'user', defaultWorkdir: dir })).status, 204)
  const sbx = await daemon.sandbox()
  assert.equal((await sbx.commands.run('whoami; pwd')).stdout, `user\n${dir}\n`)
  await sbx.files.write(`${dir}/f.txt`, 'x')
  assert.equal((await sbx.files.getInfo(`${dir}/f.txt`)).owner, 'user')
})

test('access token: right one works, wrong one is AuthenticationError', debugOnly, async (t) => {
  const dir = hostWorkdir(t)
  const daemon = await Daemon.start(t)
  assert.equal((await daemon.init({ accessToken: 'js-s3cret' })).status, 204)

  const good = daemon.sandbox('js-s3cret')
  await good.files.write(`${dir}/t.txt`, 'ok')
  assert.equal(await good.files.read(`${dir}/t.txt`), 'ok')
  assert.equal((await good.commands.run('echo ok')).stdout, 'ok\n')

  const wrong = daemon.sandbox('wrong')
  await assert.rejects(wrong.files.list(dir), AuthenticationError)
  await assert.rejects(wrong.commands.run('echo never'), AuthenticationError)
  await assert.rejects(wrong.files.read(`${dir}/t.txt`), AuthenticationError)
  await assert.rejects(wrong.files.write(`${dir}/t.txt`, 'overwritten'), AuthenticationError)
  const none = await daemon.sandbox()
  await assert.rejects(none.files.getInfo(dir), AuthenticationError)
  assert.equal(await good.files.read(`${dir}/t.txt`), 'ok')
})

test('envd restarted between two calls', debugOnly, async (t) => {
  const dir = hostWorkdir(t)
  const daemon = await Daemon.start(t)
  const sbx = await daemon.sandbox()
  assert.equal((await sbx.commands.run('echo before')).stdout, 'before\n')

  await daemon.stop()
  await assert.rejects(sbx.commands.run('echo while-down'), SandboxError)
  // The SDK passes fetch's own error through for downloads.
  await assert.rejects(sbx.files.read(`${dir}/anything`), /fetch failed/)

  await daemon.start()
  assert.equal(await sbx.isRunning(), true)
  assert.equal((await sbx.commands.run('echo after')).stdout, 'after\n')
  await sbx.files.write(`${dir}/after.txt`, 'x')
  assert.equal(await sbx.files.read(`${dir}/after.txt`), 'x')
})

test('envd stopped while a command streams output', debugOnly, async (t) => {
  const daemon = await Daemon.start(t)
  const sbx = await daemon.sandbox()
  const chunks = []
  // Bounded (10 s), so nothing outlives the test should the daemon leave its children running.
  const handle = await sbx.commands.run('for i in $(seq 200); do echo tick; sleep 0.05; done', {
    background: true,
    onStdout: (s) => chunks.push(s),
  })
  await waitUntil(() => chunks.length >= 3)
  const stoppedAt = Date.now()
  await daemon.stop()
  // envd ends open streams on SIGTERM (the SDK sees no end event) instead of hanging them.
  await assert.rejects(handle.wait(), (e) => e instanceof SandboxError && /without a result/.test(e.message))
  assert.ok(Date.now() - stoppedAt < 8000)
  await daemon.start()
  assert.equal((await sbx.commands.run('echo back')).stdout, 'back\n')
})

test('signed file URLs replace the header when a token is set', debugOnly, async (t) => {
  const dir = hostWorkdir(t)
  const daemon = await Daemon.start(t)
  assert.equal((await daemon.init({ accessToken: 'js-s3cret' })).status, 204)
  const sbx = daemon.sandbox('js-s3cret')
  const path = `${dir}/signed.txt`

  const form = new FormData()
  form.append('file', new Blob(['via url']), 'signed.txt')
  const upload = await fetch(await sbx.uploadUrl(path), { method: 'POST', body: form })
  assert.equal(upload.status, 200, await upload.text())
  assert.equal(await (await fetch(await sbx.downloadUrl(path))).text(), 'via url')
  const expiring = await sbx.downloadUrl(path, { useSignatureExpiration: 60 })
  assert.equal(await (await fetch(expiring)).text(), 'via url')

  const tampered = await fetch((await sbx.downloadUrl(path)).replace('signed.txt', 'other.txt'))
  assert.deepEqual([tampered.status, (await tampered.json()).message], [401, 'invalid signature'])
})
