"""Full-text search over runs on Postgres: a generated tsvector of the input's values and the
output, with a GIN index (RunQuerySet.search reads it).

The column is added with SQL, not as a GeneratedField on the model: Django would then read
the whole tsvector with every run it loads (the engine loads its run at each step), and the
embedded SQLite has no to_tsvector. Postgres computes the column on INSERT and on an UPDATE
of input or output only; a step's UPDATE of its run changes neither, so it stays a heap-only
update. Adding a stored column rewrites the table under an exclusive lock (seconds per
100 000 runs).

ASCII punctuation is read as a space, here and in the words searched for, so that the parts
of an email, a path, a dotted or snake_case name are words of their own: `example.com` and
`boss@exa` find boss@example.com. The input's values are taken as JSON text, its escapes
(\\n, \\", \\u0001) read as spaces too. 'simple': no stemming and no stop words; identifiers
and numbers are what people look for in runs, and prefix matching covers plurals.
"""

import string

from django.db import migrations

_PUNCTUATION = string.punctuation.replace("'", "''")
_SPACES = " " * len(string.punctuation)
DOCUMENT = f"""
to_tsvector('simple', translate(
    regexp_replace(
        jsonb_path_query_array(
            input, 'strict $.** ? (@.type() == "string" || @.type() == "number")'
        )::text,
        '\\\\(u[0-9a-fA-F]{{4}}|.)', ' ', 'g'
    ) || ' ' || output,
    '{_PUNCTUATION}', '{_SPACES}'
))
"""
ADD = f"""
ALTER TABLE runs_run ADD COLUMN search tsvector GENERATED ALWAYS AS ({DOCUMENT}) STORED;
CREATE INDEX runs_run_search ON runs_run USING gin (search);
"""
DROP = """
DROP INDEX IF EXISTS runs_run_search;
ALTER TABLE runs_run DROP COLUMN IF EXISTS search;
"""


def forwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(ADD, params=None)


def backwards(apps, schema_editor):
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(DROP, params=None)


class Migration(migrations.Migration):
    dependencies = [("runs", "0004_run_outcome_and_working_time")]
    operations = [migrations.RunPython(forwards, backwards, elidable=False)]
