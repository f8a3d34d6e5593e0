-- A journal entry written again with its output inline (a call's entry finishing after an
-- earlier write of it kept a large output in `outputs`) drops that side row within the
-- entry's own statement. Before, every entry's write was two statements, its row's and a
-- delete of the side row that nearly always found nothing (issue 22, W4).
CREATE TRIGGER journal_output_inline AFTER UPDATE OF output_external ON journal
    WHEN OLD.output_external = 1 AND NEW.output_external = 0
BEGIN
    DELETE FROM outputs
        WHERE run_id = NEW.run_id AND version = NEW.version AND seq = NEW.seq;
END;
