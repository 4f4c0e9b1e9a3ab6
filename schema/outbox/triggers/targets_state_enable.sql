CREATE TRIGGER targets_state_enable AFTER UPDATE OF enabled ON outbox.targets FOR EACH ROW WHEN ((new.enabled AND (NOT old.enabled))) EXECUTE FUNCTION outbox.targets_state_row();
