// Tags and names with tags, a start command with its ready check, a Dockerfile and delete,
// through the unmodified JS SDK.
import assert from 'node:assert/strict'
import { test } from 'node:test'

import { Sandbox, Template, waitForPort } from 'e2b'

import { api, built, context, create, deleteTemplate, facts, run, templateId, throughProxy,
  unique } from './builds.mjs'

const version = (v) =>
  Template().fromImage(facts.images.debian).runCmd(`echo ${v} > /version`, { user: 'root' })

test('tags: build with tags, create by name:tag, assign and remove', async (t) => {
  const name = built(t, unique('tags'))
  const v1 = await Template.build(version('v1'), `${name}:v1`)
  await Template.build(version('v2'), name, { tags: ['v2'] })
  const versionOf = async (ref) => run(await create(t, ref), 'cat /version')
  assert.equal(await versionOf(`${name}:v1`), 'v1')
  assert.equal(await versionOf(`${name}:v2`), 'v2')
  // No build without a tag yet: the bare name (its `default` tag) names none, a clear 4xx.
  assert.ok([400, 404].includes((await api('POST', '/sandboxes', { templateID: name })).status))
  await Template.build(version('v3'), name)
  assert.equal(await versionOf(name), 'v3')
  const tags = Object.fromEntries((await Template.getTags(name)).map((x) => [x.tag, x.buildId]))
  assert.equal(tags.v1, v1.buildId)
  await Template.assignTags(`${name}:v1`, 'stable')
  assert.equal(await versionOf(`${name}:stable`), 'v1')
  await Template.removeTags(name, 'stable')
  await assert.rejects(Sandbox.create(`${name}:stable`))
})

test('a start command: create returns with the server answering', async (t) => {
  const template = Template().fromImage(facts.images.debian).setUser('root')
    .runCmd('mkdir -p /srv/www && echo started > /srv/www/index.html')
    .setWorkdir('/srv/www')
    .setStartCmd('sleep 1 && python3 -m http.server 8000', waitForPort(8000))
  const name = built(t, unique('start'))
  await Template.build(template, name)
  const sbx = await create(t, name)
  const answer = await throughProxy(sbx, 8000)
  assert.equal(answer.status, 200)
  assert.equal(answer.body, 'started\n')
})

test('a Dockerfile', async (t) => {
  const ctx = context({ 'page.txt': 'copied page\n' })
  const dockerfile = [
    `FROM ${facts.images.debian}`,
    'RUN echo from-dockerfile > /df && mkdir -p /srv/www && echo index page > /srv/www/index.html',
    'COPY page.txt /srv/www/page.txt',
    'ENV DF_VAR=dockerfile-env',
    'WORKDIR /srv/www',
    'USER user',
    'CMD ["python3", "-m", "http.server", "8080"]',
  ].join('\n')
  const name = built(t, unique('dockerfile'))
  await Template.build(Template({ fileContextPath: ctx }).fromDockerfile(dockerfile), name)
  const sbx = await create(t, name)
  assert.equal(await run(sbx, 'cat /df /srv/www/page.txt; echo "$DF_VAR"; pwd; whoami'),
    'from-dockerfile\ncopied page\ndockerfile-env\n/srv/www\nuser')
  const answer = await throughProxy(sbx, 8080)
  assert.equal(answer.status, 200)
  assert.equal(answer.body, 'index page\n')
})

test('delete: refused while in use, then gone', async (t) => {
  const name = built(t, unique('delete'))
  await Template.build(version('gone'), name)
  const id = await templateId(name)
  const sbx = await Sandbox.create(name)
  try {
    assert.ok([400, 409].includes((await api('DELETE', `/templates/${id}`)).status))
  } finally {
    await Sandbox.kill(sbx.sandboxId)
  }
  await deleteTemplate(name)
  assert.equal(await Template.exists(name), false)
  await assert.rejects(Sandbox.create(name))
})
