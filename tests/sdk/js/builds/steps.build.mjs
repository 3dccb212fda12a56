// Builds through the unmodified JS SDK from the test's own images, checked inside a sandbox of
// the result, and the build's logs as they stream; the cache; a failing step.
import assert from 'node:assert/strict'
import { symlinkSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { test } from 'node:test'

import { BuildError, Sandbox, Template } from 'e2b'

import { api, buildStatus, built, context, create, facts, Logs, nonce, pipInstall, releaseFile, run,
  shouted, unique, waitFor } from './builds.mjs'

test('a Debian image, every step type, logs streamed while building', async (t) => {
  const ctx = context({ 'app/main.js': 'console.log(1)\n', 'app/sub/data.txt': 'data\n',
    'notes.txt': 'for user\n' })
  symlinkSync('main.js', join(ctx, 'app', 'link.js'))
  const [sayMark, mark] = shouted(`streamed-${nonce()}`)
  const release = releaseFile()
  const logs = new Logs()
  const statusAtMark = []
  let released = false // set at once: the SDK does not await this callback
  const onBuildLogs = async (entry) => {
    logs.add(entry)
    if (entry.message.includes(mark) && logs.ids && !released) {
      released = true
      statusAtMark.push((await buildStatus(logs.ids.templateID, logs.ids.buildID)).status)
      writeFileSync(release.path, 'go\n')
    }
  }
  const template = Template({ fileContextPath: ctx })
    .fromImage(facts.images.debian)
    .setUser('root') // the steps' default user is `user`, as in E2B
    .runCmd(`${sayMark} && ${waitFor(`curl -sf ${release.url}`)}`)
    .setEnvs({ BUILD_GREETING: 'hello builder' })
    .copy('app/', '/srv/app/')
    .setWorkdir('/srv/app')
    .runCmd(`${pipInstall('/opt/venv')} && echo "$BUILD_GREETING" > built-env && pwd > built-cwd`)
    .setUser('user')
    .runCmd('whoami > /home/user/built-by && mkdir -p /home/user/work')
    .copy('notes.txt', '/home/user/notes.txt', { user: 'user', mode: 0o640 })
    .setWorkdir('/home/user/work')
  const name = built(t, unique('debian'))
  await Template.build(template, name, { onBuildLogs })
  assert.deepEqual(statusAtMark, ['building'], logs.text)
  assert.ok(logs.lines(`Successfully installed ${facts.package.project}`).length, logs.text)

  const sbx = await create(t, name)
  assert.equal(await run(sbx, 'cat /srv/app/main.js /srv/app/sub/data.txt'), 'console.log(1)\ndata')
  assert.equal(await run(sbx, 'readlink /srv/app/link.js'), 'main.js')
  assert.equal(await run(sbx, 'stat -c %U:%G:%a /home/user/notes.txt'), 'user:user:640')
  assert.equal(await run(sbx, 'cat /srv/app/built-env /srv/app/built-cwd'), 'hello builder\n/srv/app')
  assert.equal(await run(sbx, 'cat /home/user/built-by'), 'user')
  const imported = `/opt/venv/bin/python -c 'import ${facts.package.module} as m; print(m.GREETING)'`
  assert.equal(await run(sbx, imported), facts.package.greeting)
  assert.equal(await run(sbx, 'echo "$BUILD_GREETING"; pwd; whoami'),
    'hello builder\n/home/user/work\nuser')
})

// Debian's busybox has no adduser: the account `app`, written by hand.
const ADD_APP = 'echo app:x:1001:1001::/home/app:/bin/sh >> /etc/passwd && ' +
  'echo app:x:1001: >> /etc/group && mkdir -p /home/app && chown app:app /home/app'

test('a busybox-style image', async (t) => {
  const ctx = context({ 'tool.sh': '#!/bin/sh\necho "tool says $MODE"\n' })
  const template = Template({ fileContextPath: ctx })
    .fromImage(facts.images.busybox)
    .setUser('root')
    .runCmd(`${ADD_APP} && echo made > /made-by-root`)
    .setEnvs({ MODE: 'busy' })
    .copy('tool.sh', '/usr/local/bin/tool.sh', { mode: 0o755 })
    .setWorkdir('/srv')
    .setUser('app')
    .runCmd('id -un > /home/app/who && echo "$MODE" > /home/app/mode')
  const name = built(t, unique('busybox'))
  await Template.build(template, name)
  const sbx = await create(t, name)
  assert.equal(await run(sbx, 'cat /made-by-root /home/app/who /home/app/mode'), 'made\napp\nbusy')
  assert.equal(await run(sbx, 'stat -c %U /home/app/who'), 'app')
  assert.equal(await run(sbx, 'tool.sh'), 'tool says busy')
  assert.equal(await run(sbx, 'whoami; pwd'), 'app\n/srv')
})

test('a cached rebuild reuses the steps; skipCache does not', async (t) => {
  const [sayMark, mark] = shouted(`stamped-${nonce()}`)
  const template = Template().fromImage(facts.images.debian).setUser('root')
    .runCmd(`date +%s%N > /stamp && ${sayMark}`)
  const name = built(t, unique('cache'))
  const stamp = async () => run(await create(t, name), 'cat /stamp')
  const [first, second, forced] = [new Logs(), new Logs(), new Logs()]
  await Template.build(template, name, { onBuildLogs: first.add })
  const stamped = await stamp()
  assert.ok(first.lines(mark).length)
  await Template.build(template, name, { onBuildLogs: second.add })
  assert.equal(await stamp(), stamped)
  assert.equal(second.lines(mark).length, 0, second.text)
  assert.ok(second.entries.some((e) => /cached/i.test(e.message) && !/upload/i.test(e.message)),
    second.text)
  await Template.build(template, name, { onBuildLogs: forced.add, skipCache: true })
  assert.ok(forced.lines(mark).length)
  assert.notEqual(await stamp(), stamped)
})

test('a failing step: BuildError, its number and its output', async (t) => {
  const [sayOut, out] = shouted(`out-${nonce()}`)
  const [sayErr, err] = shouted(`err-${nonce()}`)
  const template = Template().fromImage(facts.images.debian)
    .runCmd('echo fine > /tmp/fine')
    .runCmd(`${sayOut} && (${sayErr}) >&2 && exit 7`)
  const name = built(t, unique('failing'))
  const logs = new Logs()
  await assert.rejects(Template.build(template, name, { onBuildLogs: logs.add }), BuildError)
  assert.ok(logs.lines(out).length, logs.text)
  assert.ok(logs.lines(err).length, logs.text)
  const status = await buildStatus(logs.ids.templateID, logs.ids.buildID)
  assert.equal(status.status, 'error')
  assert.equal(status.reason.step, '2')
  assert.match(status.reason.message, /^failed to run command '.*': command failed: exit status 7$/s)
  await assert.rejects(Sandbox.create(name))
  assert.ok([400, 404].includes((await api('POST', '/sandboxes', { templateID: name })).status))
})
