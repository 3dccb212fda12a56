-- ../0008_teams.sql: teams, the team of every key, sandbox, template and volume (the default
-- team's for what was there before), template aliases and volume names unique per team.
CREATE TABLE teams (
    team_id    text PRIMARY KEY,
    name       text NOT NULL UNIQUE,
    slug       text NOT NULL UNIQUE,
    created_at bigint NOT NULL
);
INSERT INTO teams VALUES ('00000000-0000-4000-8000-000000000001', 'sandboxd', 'sandboxd', 0);

ALTER TABLE api_keys ADD COLUMN team_id text NOT NULL
    DEFAULT '00000000-0000-4000-8000-000000000001';
ALTER TABLE sandboxes ADD COLUMN team_id text NOT NULL
    DEFAULT '00000000-0000-4000-8000-000000000001';
ALTER TABLE sandbox_metrics ADD COLUMN team_id text NOT NULL
    DEFAULT '00000000-0000-4000-8000-000000000001';
ALTER TABLE team_metrics ADD COLUMN team_id text NOT NULL
    DEFAULT '00000000-0000-4000-8000-000000000001';
ALTER TABLE events ADD COLUMN team_id text;

ALTER TABLE templates DROP CONSTRAINT templates_alias_key;
ALTER TABLE templates ADD COLUMN team_id text NOT NULL
    DEFAULT '00000000-0000-4000-8000-000000000001';
ALTER TABLE templates ADD CONSTRAINT templates_team_alias_key UNIQUE (team_id, alias);

ALTER TABLE volumes DROP CONSTRAINT volumes_name_key;
ALTER TABLE volumes ADD COLUMN team_id text NOT NULL
    DEFAULT '00000000-0000-4000-8000-000000000001';
ALTER TABLE volumes ADD CONSTRAINT volumes_team_name_key UNIQUE (team_id, name)
