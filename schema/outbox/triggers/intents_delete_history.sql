CREATE TRIGGER intents_delete_history AFTER DELETE ON outbox.intents REFERENCING OLD TABLE AS old_intents FOR EACH STATEMENT EXECUTE FUNCTION outbox.intents_delete_history();
