-- What a run spent (model tokens and cost, asks, tool calls: `Spend`), written by each step's
-- commit as the total through that step, and the budget that bounds it (`Budget`), set at its
-- start and changed by an operator. NULL: nothing spent, no budget.
ALTER TABLE runs ADD COLUMN spend TEXT;
ALTER TABLE runs ADD COLUMN budget TEXT;
