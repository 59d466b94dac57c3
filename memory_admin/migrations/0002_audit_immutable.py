from django.db import migrations

# Audit events are immutable. The one exception is an explicit erase (GDPR), which sets
# `memory_admin.erasing` for its own transaction to scrub the erased user's content.
SQL = """
CREATE OR REPLACE FUNCTION memory_admin_audit_immutable() RETURNS trigger AS $$
BEGIN
    IF current_setting('memory_admin.erasing', true) = 'on' THEN
        IF TG_OP = 'DELETE' THEN RETURN OLD; END IF;
        RETURN NEW;
    END IF;
    RAISE EXCEPTION 'audit events are immutable' USING ERRCODE = 'insufficient_privilege';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER memory_admin_audit_immutable
BEFORE UPDATE OR DELETE ON memory_admin_auditevent
FOR EACH ROW EXECUTE FUNCTION memory_admin_audit_immutable();
"""

REVERSE = """
DROP TRIGGER IF EXISTS memory_admin_audit_immutable ON memory_admin_auditevent;
DROP FUNCTION IF EXISTS memory_admin_audit_immutable();
"""


class Migration(migrations.Migration):
    dependencies = [("memory_admin", "0001_initial")]
    operations = [migrations.RunSQL(SQL, REVERSE)]
