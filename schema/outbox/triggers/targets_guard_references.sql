CREATE TRIGGER targets_guard_references BEFORE DELETE OR UPDATE OF name ON outbox.targets FOR EACH ROW EXECUTE FUNCTION outbox.targets_guard_references();
