"""Tests of the store on SQLite and PostgreSQL: faults, backups, migrations, shared stores."""
