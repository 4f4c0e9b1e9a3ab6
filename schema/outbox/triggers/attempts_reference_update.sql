CREATE TRIGGER attempts_reference_update AFTER UPDATE ON outbox.attempts REFERENCING NEW TABLE AS new_attempts FOR EACH STATEMENT EXECUTE FUNCTION outbox.attempts_check_intents();
