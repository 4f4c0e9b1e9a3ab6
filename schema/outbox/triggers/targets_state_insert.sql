CREATE TRIGGER targets_state_insert AFTER INSERT ON outbox.targets FOR EACH ROW EXECUTE FUNCTION outbox.targets_state_row();
